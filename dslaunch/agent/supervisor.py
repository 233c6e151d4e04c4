"""Spawn one node's ranks and supervise them in a single selector loop.

Every rank is its own session (so a signal reaches the rank's children too)
and carries a parent-death signal, so nothing survives a SIGKILLed agent. The
agent is a child subreaper: what a rank double-forks (a ``setsid`` daemon)
becomes the agent's child, and is killed when the ranks are done, as is
anything of the job's that is still left on this node (docs/teardown.md).
The loop wakes on rank output, rank exit (pidfd), the control channel,
signals and the output sinks; the first failing rank makes every other rank
get SIGTERM at once and SIGKILL after the grace period. Rank output goes
through ``relay`` (prefixes, long lines, ``\r`` bars) into one ``Sink`` per
output fd, which a writer thread drains: the loop itself never blocks on a
reader, and stops reading a rank while its sink is full (docs/output.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import selectors
import signal
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from dslaunch import _prctl, procs, wire
from dslaunch.agent import ranks as rankspec
from dslaunch.agent.progress import ProgressWatch
from dslaunch.agent.relay import READ_SIZE, LineRelay
from dslaunch.agent.sink import Sink
from dslaunch.logs import get_logger, phases
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.agent.zygote import Zygote

_STDERR_TAIL = 20
_TAIL_BYTES = 16 << 10  # raw stderr kept per rank for the failure summary
STALL = 0.5  # while stopping, a reader that takes no output for this long is given up on
_BAR_PAUSE = 0.02  # a stream showing a \r bar that writes little is read at most this often
_BAR_PIPE = 256 << 10  # 64 ranks drawing bars stay well inside the default per-user pipe quota (64 MiB)
_HELD_OPEN = 0.5  # ranks gone, pipes silent this long (a grandchild holds them): stop reading
_TEARDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_FORWARD_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)
_STACKS = signal.SIGQUIT  # print every rank's stack (agent/progress.py)


def _log_debug(event: str, argv: list[str], **kw: object) -> None:
    log = get_logger("agent")
    if log.is_enabled_for(10):
        import shlex

        from dslaunch.masking import mask

        log.debug(event, command=mask(shlex.join(argv)), **kw)


def _rank_preexec() -> None:  # runs in the child between fork and exec: prctl was resolved before the fork
    os.setsid()
    _prctl.set_parent_death_signal(signal.SIGKILL)


@dataclass
class _Rank:
    rank: int
    local_rank: int
    proc: os.PathLike[str] | object
    pid: int
    pidfd: int | None
    prefix: bytes
    error_file: str
    stdout_log: BinaryIO | None = None
    stderr_log: BinaryIO | None = None
    tail: bytes = b""  # the last _TAIL_BYTES of its stderr
    streams: list[_Stream] = field(default_factory=list)
    signalled: bool = False
    signalled_at: float = 0.0  # time.time() of our stop signal
    returncode: int | None = None


@dataclass(eq=False)
class _Stream:
    """One of a rank's pipes on its way to a sink."""

    fd: int
    pipe: IO[bytes]
    rank: _Rank
    relay: LineRelay
    sink: Sink
    log: BinaryIO | None
    is_err: bool
    resume_at: float = 0.0  # a bar that writes little is read again only from then
    watched: bool = False
    roomy: bool = False  # its pipe was enlarged for a bar


class NodeSupervisor:
    def __init__(
        self,
        plan: LaunchPlan,
        node_rank: int,
        *,
        control: BinaryIO | None,
        out: int,
        err: int,
        events: int | None = None,
    ) -> None:
        """Rank output goes to the fds ``out`` and ``err``; events to ``events``, else before ``out``'s output."""
        self.plan = plan
        self.node = plan.node(node_rank)
        self.control = control
        self.events = events
        self.ranks: list[_Rank] = []
        self.streams: dict[int, _Stream] = {}
        self.sel = selectors.DefaultSelector()
        self.stop_deadline: float | None = None
        self.root_cause: wire.RankExit | None = None
        self.stop_signal: int | None = None
        self._control = wire.ControlReader()
        self._last_read = time.monotonic()
        self._ranks_done_at: float | None = None
        self._sink_wake, wake_w = os.pipe()
        os.set_blocking(self._sink_wake, False)
        os.set_blocking(wake_w, False)
        # Live bars only on a terminal, never on a stream that also carries events.
        self.out_sink = Sink(out, live=events is not None and os.isatty(out), wake=wake_w)
        self.err_sink = (
            self.out_sink if _same_file(out, err) else Sink(err, live=os.isatty(err), wake=wake_w)
        )  # one writer for `2>&1`, so stdout and stderr lines never interleave mid-line
        self.sinks = [self.out_sink] if self.err_sink is self.out_sink else [self.out_sink, self.err_sink]
        self.progress: ProgressWatch | None = None

    # ---- spawning -------------------------------------------------------
    def start(self, error_dir: str) -> None:
        import subprocess  # keep agent start-up lean

        _prctl.set_child_subreaper()
        log_dir = self.plan.log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        self.progress = progress = ProgressWatch(self.plan, self.node.node_rank, error_dir)
        zygote = None
        if self.plan.preload:  # --preload: fork the ranks from one process that imported the modules (zygote.py)
            from dslaunch.agent.zygote import for_node

            zygote = for_node(self.plan, self.node, os.environ, error_dir)
        try:
            self._start_ranks(subprocess, zygote, progress, log_dir, error_dir)
        finally:
            if zygote is not None:
                zygote.close()

    def _start_ranks(
        self, subprocess: Any, zygote: Zygote | None, progress: ProgressWatch, log_dir: str | None, error_dir: str
    ) -> None:
        for local_rank, rank in enumerate(self.node.ranks):
            error_dir_for_rank = log_dir or error_dir
            error_file = os.path.join(error_dir_for_rank, f"rank{rank}.error.json")
            try:
                os.unlink(error_file)
            except FileNotFoundError:
                pass
            env = rankspec.rank_env(self.plan, self.node, local_rank, os.environ, error_file)
            progress.add(rank, env)
            argv = rankspec.rank_argv(self.plan, local_rank, self.node)
            try:
                proc = (zygote and zygote.spawn(argv, env, self.plan.cwd, rank)) or subprocess.Popen(
                    argv,
                    env=env,
                    cwd=self.plan.cwd or None,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    preexec_fn=_rank_preexec,
                )
            except OSError as exc:  # a --no-python target that is missing, a directory, not executable...
                self._cannot_start(rank, local_rank, argv[0], exc)
                return
            r = _Rank(
                rank=rank,
                local_rank=local_rank,
                proc=proc,
                pid=proc.pid,
                pidfd=_pidfd(proc.pid),
                prefix=rankspec.output_prefix(self.plan, self.node, local_rank).encode(),
                error_file=error_file,
            )
            if log_dir:
                r.stdout_log = open(os.path.join(log_dir, f"rank{rank}.stdout.log"), "ab")
                r.stderr_log = open(os.path.join(log_dir, f"rank{rank}.stderr.log"), "ab")
            self.ranks.append(r)
            progress.started(rank, proc.pid)
            pipes = ((proc.stdout, self.out_sink, r.stdout_log), (proc.stderr, self.err_sink, r.stderr_log))
            for pipe, sink, log in pipes:
                assert pipe is not None  # Popen(stdout=PIPE) always gives one
                fd = pipe.fileno()
                os.set_blocking(fd, False)
                relay = LineRelay(r.prefix, live=sink.live)
                self.streams[fd] = stream = _Stream(fd, pipe, r, relay, sink, log, is_err=pipe is proc.stderr)
                r.streams.append(stream)
            if r.pidfd is not None:
                self.sel.register(r.pidfd, selectors.EVENT_READ, ("exit", r))
            self._emit(wire.encode(wire.Spawned(rank=rank, local_rank=local_rank, pid=proc.pid, host=self.node.host)))
            _log_debug("rank started", rank=rank, local_rank=local_rank, pid=proc.pid, argv=argv)
            phases.record("spawned", env=env, rank=rank, local_rank=local_rank, pid=proc.pid)

    def _cannot_start(self, rank: int, local_rank: int, program: str, exc: OSError) -> None:
        """A rank that cannot be started fails like one that exits 127 (not found) or 126 (cannot run), as a shell
        would: its error goes in the summary, and the ranks already started are stopped."""
        result = wire.RankExit(
            rank=rank,
            local_rank=local_rank,
            node_rank=self.node.node_rank,
            host=self.node.host,
            pid=0,
            code=127 if isinstance(exc, FileNotFoundError) else 126,
            signal=None,
            ts=time.time(),
            by_agent=False,
            error=f"cannot start rank {rank}: {program}: {exc.strerror or exc}\n",
            stderr_tail=(),
        )
        self._emit(wire.encode(result))
        self.root_cause = result
        self._teardown(signal.SIGTERM)

    # ---- main loop ------------------------------------------------------
    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        old_wakeup = signal.set_wakeup_fd(wake_w)
        caught = (*_TEARDOWN_SIGNALS, *_FORWARD_SIGNALS, _STACKS)
        old_handlers = {s: signal.signal(s, lambda *_: None) for s in caught}
        self.sel.register(wake_r, selectors.EVENT_READ, ("signal", None))
        self.sel.register(self._sink_wake, selectors.EVENT_READ, ("sink", None))
        if self.control is not None:
            os.set_blocking(self.control.fileno(), False)
            self.sel.register(self.control.fileno(), selectors.EVENT_READ, ("control", None))
        for sink in self.sinks:
            sink.start()  # threads only now: the ranks were forked from a single-threaded process
        try:
            self._loop()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self._kill_leftovers()
            if self.progress is not None:
                self.progress.close()
        code = self._exit_code()
        self._emit(wire.encode(wire.Done(node_rank=self.node.node_rank, code=code)))
        for sink in self.sinks:
            sink.wait_idle(STALL if self.stop_deadline is not None else None)
        return code

    def _loop(self) -> None:
        while True:
            now = time.monotonic()
            alive = [r for r in self.ranks if r.returncode is None]
            if self.stop_deadline is not None:
                self._give_up_stalled_readers()
            if not alive and self._ranks_done_at is None:
                self._ranks_done_at = now
            if not alive and self.streams and self._held_open_too_long(now):
                self._kill_descendants()  # what holds the pipes open outlived its rank
                for stream in list(self.streams.values()):
                    self._close_stream(stream)
            if not alive and not self.streams and all(sink.idle for sink in self.sinks):
                return
            timeout = self._watch(now)
            if any(r.pidfd is None for r in alive):
                timeout = _min(timeout, 0.05)
            if not alive:
                timeout = _min(timeout, 0.1)  # waiting for pipes to close and output to drain
                for sink in self.sinks:
                    sink.want_wake = True
            if self.stop_deadline is not None and alive:
                remaining = self.stop_deadline - time.monotonic()
                if remaining <= 0:
                    for r in alive:
                        _killpg(r.pid, signal.SIGKILL)
                    remaining = 0.05
                timeout = _min(timeout, remaining)
            if self.stop_deadline is not None:
                timeout = _min(timeout, STALL / 2)
            due = self.progress.due(now) if self.progress is not None and alive else None
            if due is not None:
                timeout = _min(timeout, due)
            for key, _ in self.sel.select(timeout):
                kind, what = key.data
                if kind == "pipe":
                    if self.streams.get(key.fd) is what:  # not closed earlier in this round
                        self._catch_up(self.streams[key.fd])
                        self._read(self.streams[key.fd])
                elif kind == "exit":
                    if what.returncode is None:
                        self._reap(what)
                elif kind == "control":
                    self._read_control()
                elif kind == "signal":
                    self._read_signals(key.fd)
                elif kind == "sink":
                    _drain(key.fd)
            for r in alive:
                if r.pidfd is None and r.returncode is None:
                    self._reap(r, block=False)
            if self.progress is not None and self.stop_deadline is None:
                for event in self.progress.tick(time.monotonic()):
                    self._emit(wire.encode(event))

    def _watch(self, now: float) -> float | None:
        """Watch the pipes whose sink has room and that are not paused; the time until one resumes."""
        resume: float | None = None
        for stream in self.streams.values():
            if stream.sink.full:
                stream.sink.want_wake = True  # before the check below: no wake-up can be missed
            want = not stream.sink.full and now >= stream.resume_at
            if want != stream.watched:
                if want:
                    self.sel.register(stream.fd, selectors.EVENT_READ, ("pipe", stream))
                else:
                    self.sel.unregister(stream.fd)
                stream.watched = want
            if not want and not stream.sink.full:
                resume = _min(resume, stream.resume_at - now)
        return resume

    def _held_open_too_long(self, now: float) -> bool:
        """Ranks gone, their pipes still open: silent for a moment, or written to for the whole grace period."""
        assert self._ranks_done_at is not None
        reading_all = not any(stream.sink.full for stream in self.streams.values())
        silent = now - self._last_read > _HELD_OPEN and reading_all
        return silent or now - self._ranks_done_at > self.plan.shutdown_timeout

    def _give_up_stalled_readers(self) -> None:
        for sink in self.sinks:
            if not sink.dead and sink.stalled(STALL):
                sink.abandon()
                get_logger("agent").info("output reader stalled while stopping: dropping rank output", fd=sink.fd)

    def _catch_up(self, stream: _Stream) -> None:
        """Before new output of a rank, what its paused bar stream holds: keep its order across the two pipes."""
        for other in stream.rank.streams:
            if other is not stream and other.fd in self.streams and other.resume_at > time.monotonic():
                other.resume_at = 0.0
                while self._read(other) == READ_SIZE:
                    pass

    def _read(self, stream: _Stream) -> int:
        """Read one chunk from a rank's pipe into its sink; its size (0: nothing to read, or the end)."""
        try:
            chunk = os.read(stream.fd, READ_SIZE)
        except BlockingIOError:
            return 0
        now = self._last_read = time.monotonic()
        if not chunk:
            self._close_stream(stream)
            return 0
        if stream.log is not None:
            stream.log.write(chunk)
            stream.log.flush()
        if stream.is_err:
            r = stream.rank
            r.tail = (r.tail + chunk if len(chunk) < _TAIL_BYTES else chunk)[-_TAIL_BYTES:]
        if self.progress is not None:
            self.progress.output(stream.rank.rank, chunk, stream.is_err)
        pieces, bar = stream.relay.feed(chunk)
        stream.sink.put(stream, pieces, bar)
        if stream.relay.barred and len(chunk) < READ_SIZE:
            if not stream.roomy:
                stream.roomy = True
                _enlarge(stream.fd)  # the rank writes on while we pause
            stream.resume_at = now + _BAR_PAUSE
        return len(chunk)

    def _close_stream(self, stream: _Stream) -> None:
        if stream.watched:
            self.sel.unregister(stream.fd)
        del self.streams[stream.fd]
        stream.pipe.close()
        stream.sink.put(stream, stream.relay.close(), None)

    def _reap(self, r: _Rank, block: bool = True) -> None:
        proc = r.proc
        returncode = proc.wait() if block else proc.poll()  # type: ignore[attr-defined]
        if returncode is None:
            return
        r.returncode = returncode
        if self.progress is not None:
            self.progress.ended(r.rank)
        if r.pidfd is not None:
            self.sel.unregister(r.pidfd)
            os.close(r.pidfd)
            r.pidfd = None
        code, signame = wire.exit_code_of(returncode)
        if code:  # its last stderr lines may still be in the pipe: they belong in the summary
            for stream in [s for s in r.streams if s.is_err and s.fd in self.streams]:
                for _ in range(8):
                    if not self._read(stream):
                        break
        self._last_read = time.monotonic()
        error, failed_at, failed_with = _read_error_file(r.error_file) if code else (None, None, None)
        # A rank that failed on its own and was still in its at-exit teardown when our stop signal came
        # is a root-cause candidate, at the time and with the code it failed with, not how it ended.
        on_its_own = failed_at is not None and (not r.signalled or failed_at < r.signalled_at)
        if on_its_own and r.signalled and failed_with:
            code, signame = failed_with, None
        result = wire.RankExit(
            rank=r.rank,
            local_rank=r.local_rank,
            node_rank=self.node.node_rank,
            host=self.node.host,
            pid=r.pid,
            code=code,
            signal=signame,
            ts=failed_at if on_its_own and failed_at is not None else time.time(),
            by_agent=r.signalled and not on_its_own,
            error=error,
            stderr_tail=_tail_lines(r.tail) if code else (),
        )
        self._emit(wire.encode(result))
        phases.record("exit", rank=r.rank, local_rank=r.local_rank, pid=r.pid, code=code, signal=signame)
        if result.failed and not result.by_agent and self.root_cause is None:
            self.root_cause = result
            self._teardown(signal.SIGTERM)

    def _read_control(self) -> None:
        assert self.control is not None
        try:
            data = os.read(self.control.fileno(), 4096)
        except BlockingIOError:
            return
        if not data:  # the launcher or its connection is gone
            self.sel.unregister(self.control.fileno())
            self.stop()
            return
        self.feed_control(data)

    def feed_control(self, data: bytes) -> None:
        """Bytes from the control channel: whole lines are obeyed, a partial one waits for the rest."""
        self.obey(self._control.feed(data))

    def obey(self, commands: list[str | int]) -> None:
        """Act on control commands: ``stop``, or a signal number to pass to every live rank."""
        for command in commands:
            if command == wire.STOP:
                self.stop()
            elif command == _STACKS:
                self.request_stacks()
            elif isinstance(command, int):  # from a remote launcher, which cannot signal us
                for r in self.ranks:
                    if r.returncode is None:
                        _killpg(r.pid, command)

    def request_stacks(self) -> None:
        """Every live rank prints its stack; the job goes on (agent/progress.py)."""
        if self.progress is None or self.stop_deadline is not None:
            return
        prefixes = {r.rank: r.prefix for r in self.ranks}
        for rank, text in self.progress.request_stacks():
            if rank in prefixes:
                self.err_sink.put(self, [prefixes[rank] + text.encode() + b"\n"])

    def stop(self) -> None:
        if self.stop_signal is None:
            self.stop_signal = signal.SIGTERM
        self._teardown(signal.SIGTERM)

    def _read_signals(self, fd: int) -> None:
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return
        for signum in data:
            if signum == _STACKS:
                self.request_stacks()
            elif signum in _FORWARD_SIGNALS:
                if self.plan.slurm.signals_ranks:
                    continue  # the scheduler (Slurm) already signalled every process of the step
                for r in self.ranks:
                    if r.returncode is None:
                        _killpg(r.pid, signum)
            elif signum in _TEARDOWN_SIGNALS:
                if self.stop_signal is None:
                    self.stop_signal = signum
                self._teardown(signum)

    def _teardown(self, sig: int) -> None:
        if self.stop_deadline is None:
            get_logger("agent").info("stopping ranks", signal=signal.Signals(sig).name)
            self.stop_deadline = time.monotonic() + self.plan.shutdown_timeout
        for r in self.ranks:
            if r.returncode is None and not r.signalled:  # one signal per rank per teardown
                r.signalled = True
                r.signalled_at = time.time()
                _killpg(r.pid, sig)

    def _kill_leftovers(self) -> None:
        """Nothing the job started here outlives it: the ranks' sessions, every descendant (the agent is a
        subreaper, so double-forked daemons are among them), and, as a backstop, any process with this job's
        run id and node rank."""
        for r in self.ranks:
            _killpg(r.pid, signal.SIGKILL)
            if r.returncode is None:
                self._reap(r)
            for log in (r.stdout_log, r.stderr_log):
                if log is not None:
                    log.close()
        self._kill_descendants()
        for pid in procs.job_pids(self.plan.run_id, self.node.node_rank):
            _kill(pid)

    def _kill_descendants(self) -> None:
        ranks = {r.pid for r in self.ranks}
        found = [pid for pid in procs.descendants(os.getpid()) if pid not in ranks]
        for pid in found:
            _kill(pid)
        for pid in found:  # adopted orphans are ours to reap; others are their parents' (also killed)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def _exit_code(self) -> int:
        if self.root_cause is not None:
            return self.root_cause.code
        if self.stop_signal is not None:
            return 128 + self.stop_signal
        failed = [r for r in self.ranks if r.returncode]
        return wire.exit_code_of(failed[0].returncode)[0] if failed and failed[0].returncode else 0

    def _emit(self, line: str) -> None:
        """An event: on its own pipe when there is one (the launcher always reads it), else before queued output."""
        if self.events is None:
            self.out_sink.put_urgent(line.encode())
            return
        data = memoryview(line.encode())
        try:
            while data:
                data = data[os.write(self.events, data) :]
        except OSError:
            pass

    def console(self) -> _Console:
        """A stand-in for ``sys.stderr``: the agent's own log lines queue with the ranks' stderr."""
        return _Console(self.err_sink)


class _Console:
    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def write(self, text: str) -> int:
        self.sink.put(self, [text.encode("utf-8", "replace")])
        return len(text)

    def flush(self) -> None:
        pass


def _enlarge(fd: int) -> None:
    """Let a pipe hold ``_BAR_PIPE`` bytes (Linux), so pausing its reader rarely blocks the writer."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _BAR_PIPE)
    except OSError:
        pass  # over the user's pipe-size limits: the pipe keeps its size


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return a == b
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _tail_lines(raw: bytes) -> tuple[str, ...]:
    """The last lines of a rank's stderr as a terminal showed them (the final state of a \r line)."""
    lines = raw.decode("utf-8", "replace").split("\n")
    if len(raw) >= _TAIL_BYTES:
        lines = lines[1:]  # cut at the front
    if lines and not lines[-1]:
        lines.pop()
    shown = [line.rstrip("\r") for line in lines]
    return tuple(line[line.rfind("\r") + 1 :] for line in shown[-_STDERR_TAIL:])


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_error_file(path: str) -> tuple[str | None, float | None, int | None]:
    """The failure's text and, when the bootstrap wrote it, the time the rank failed and its exit code."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    message = data.get("message")  # torch's @record: {"message": {"message": ..., "extraInfo": {"py_callstack"}}}
    if isinstance(message, dict):
        info = message.get("extraInfo")
        callstack = info.get("py_callstack") if isinstance(info, dict) else None
        return (callstack if isinstance(callstack, str) else None), None, None
    traceback, ts, code = data.get("traceback"), data.get("ts"), data.get("code")
    return (
        traceback if isinstance(traceback, str) else None,
        float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None,
        code if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 256 else None,
    )
