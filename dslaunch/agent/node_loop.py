"""Spawn one node's ranks and run them in a single selector loop: the I/O around ``agent/node_state.py``.

Every rank is its own session (so a signal reaches the rank's children too)
and carries a parent-death signal, so nothing survives a SIGKILLed agent. The
agent is a child subreaper: what a rank double-forks (a ``setsid`` daemon)
becomes the agent's child, and is killed when the ranks are done, as is
anything of the job's that is still left on this node (docs/teardown.md).
The loop wakes on rank output, rank exit (pidfd), the control channel,
signals and the output sinks, tells :class:`NodeState` what happened and
executes what it answers; it decides nothing itself. Rank output goes
through ``relay`` (prefixes, long lines, ``\\r`` bars) into one ``Sink`` per
output fd, which a writer thread drains: the loop itself never blocks on a
reader, and stops reading a rank while its sink is full (docs/output.md).
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from dslaunch import wire
from dslaunch.agent import node_state as ns
from dslaunch.agent import ranks as rankspec
from dslaunch.agent.failures import ErrorRecord, keep_tail, read_error_file, tail_lines
from dslaunch.agent.node_io import (
    drain,
    enlarge_pipe,
    fs_clock_offset,
    kill,
    killpg,
    pidfd_of,
    rank_preexec,
    same_file,
)
from dslaunch.agent.watch import ProgressWatch
from dslaunch.logs import get_logger, phases
from dslaunch.oslib import prctl, procs
from dslaunch.oslib.owner_only import private_dir, private_open
from dslaunch.output import collapse
from dslaunch.output.collapse_agent import SinkCollapse
from dslaunch.output.prefix import output_prefix
from dslaunch.output.relay import READ_SIZE, LineRelay, Piece
from dslaunch.output.sink import Sink
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.agent.preload.client import Zygote

_BAR_PAUSE = 0.02  # a stream showing a \r bar that writes little is read at most this often
_PID_POLL = 0.05  # a rank without a pidfd is polled this often
_TAIL_READS = 8  # chunks of a failed rank's stderr read at its exit, for the summary


def _log_debug(event: str, argv: list[str], **kw: object) -> None:
    log = get_logger("agent")
    if log.is_enabled_for(10):
        import shlex

        from dslaunch.masking import mask

        log.debug(event, command=mask(shlex.join(argv)), **kw)


@dataclass
class _Rank:
    rank: int
    local_rank: int
    proc: Any  # subprocess.Popen, or zygote.ForkedRank
    pid: int
    pidfd: int | None
    prefix: bytes
    error_file: str
    stdout_log: IO[bytes] | None = None
    stderr_log: IO[bytes] | None = None
    tail: bytes = b""  # the last error_record.TAIL_BYTES of its stderr
    streams: list[_Stream] = field(default_factory=list)
    reaped: bool = False


@dataclass(eq=False)
class _Stream:
    """One of a rank's pipes on its way to a sink."""

    fd: int
    pipe: IO[bytes]
    rank: _Rank
    relay: LineRelay
    sink: Sink
    log: IO[bytes] | None
    is_err: bool
    resume_at: float = 0.0  # a bar that writes little is read again only from then
    watched: bool = False
    roomy: bool = False  # its pipe was enlarged for a bar
    collapse: SinkCollapse | None = None  # identical lines of many ranks print once (output/collapse.py)

    def put(self, pieces: list[Piece], bar: bytes | None) -> None:
        if self.collapse is None:
            self.sink.put(self, pieces, bar)
        else:
            self.collapse.put(self, self.rank.rank, self.rank.prefix, pieces, bar, now=time.monotonic())


class _Pipes:
    """``node_state.Pipes`` over the loop's streams and sinks."""

    def __init__(self, loop: NodeLoop) -> None:
        self._loop = loop

    @property
    def open(self) -> bool:
        return bool(self._loop.streams)

    @property
    def reading_all(self) -> bool:
        return not any(stream.sink.full for stream in self._loop.streams.values())

    @property
    def drained(self) -> bool:
        return all(sink.idle for sink in self._loop.sinks)


class NodeLoop:
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
        self.by_rank: dict[int, _Rank] = {}
        self.streams: dict[int, _Stream] = {}
        self.sel = selectors.DefaultSelector()
        self._round: ns.DeathWindow | None = None  # while the ranks the last wait found ended are reaped
        self.state = ns.NodeState(
            node_rank,
            self.node.host,
            shutdown_timeout=plan.shutdown_timeout,
            slurm_signals_ranks=plan.slurm.signals_ranks,
            now=time.monotonic(),
        )
        self._pipes = _Pipes(self)
        self._control = wire.ControlReader()
        self._sink_wake, wake_w = os.pipe()
        os.set_blocking(self._sink_wake, False)
        os.set_blocking(wake_w, False)
        # Live bars only on a terminal, never on a stream that also carries events.
        self.out_sink = Sink(out, live=events is not None and os.isatty(out), wake=wake_w)
        self.err_sink = (
            self.out_sink if same_file(out, err) else Sink(err, live=os.isatty(err), wake=wake_w)
        )  # one writer for `2>&1`, so stdout and stderr lines never interleave mid-line
        self.sinks = [self.out_sink] if self.err_sink is self.out_sink else [self.out_sink, self.err_sink]
        self.collapses = self._collapses(plan, forked=events is not None)
        # where the launcher collapses this agent's stderr, it is told to print what it holds when a rank fails
        self._flush_mark = plan.collapse_output and self.err_sink.fd not in self.collapses
        self.progress: ProgressWatch | None = None
        self.fs_clock_offset = 0.0  # of the error files' folder (node_io.fs_clock_offset)

    def _collapses(self, plan: LaunchPlan, forked: bool) -> dict[int, SinkCollapse]:
        """By sink fd: where this agent writes ranks' lines to the console itself, it collapses them."""
        if not plan.collapse_output:
            return {}
        found: dict[int, SinkCollapse] = {}
        for sink, wanted in zip((self.out_sink, self.err_sink), collapse.agent_collapses(plan.launcher, forked)):
            if wanted and sink.fd not in found:
                found[sink.fd] = SinkCollapse(sink, self.node.host, with_host=len(plan.nodes) > 1)
        return found

    # ---- spawning -------------------------------------------------------
    def start(self, error_dir: str, warm: Mapping[int, Zygote | None] | None = None) -> None:
        """Start the ranks; ``warm``: the zygotes a local launcher keeps for the job (preload/warm.py)."""
        import subprocess  # keep agent start-up lean

        prctl.set_child_subreaper()
        log_dir = self.plan.log_dir
        if log_dir:
            private_dir(log_dir)
        self.progress = progress = ProgressWatch(self.plan, self.node.node_rank, error_dir)
        self.fs_clock_offset = fs_clock_offset(log_dir or error_dir)
        zygote = None
        if self.plan.preload:  # --preload: fork the ranks from one process that imported the modules (preload/)
            from dslaunch.agent.preload.client import for_node

            zygote = for_node(self.plan, self.node, os.environ, error_dir, warm)
        try:
            self._start_ranks(subprocess, zygote, progress, log_dir, error_dir)
        finally:
            if zygote is not None:
                zygote.close()

    def _start_ranks(
        self, subprocess: Any, zygote: Zygote | None, progress: ProgressWatch, log_dir: str | None, error_dir: str
    ) -> None:
        for local_rank, rank in enumerate(self.node.ranks):
            error_file = _fresh_error_file(log_dir or error_dir, rank)
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
                    preexec_fn=rank_preexec,
                )
            except OSError as exc:  # a --no-python target that is missing, a directory, not executable...
                self._cannot_start(rank, local_rank, argv[0], exc)
                return
            self._add_rank(rank, local_rank, proc, error_file, log_dir)
            progress.started(rank, proc.pid)
            self._apply(self.state.on_spawned(rank, local_rank, proc.pid))
            _log_debug("rank started", rank=rank, local_rank=local_rank, pid=proc.pid, argv=argv)
            phases.record("spawned", env=env, rank=rank, local_rank=local_rank, pid=proc.pid)

    def _add_rank(self, rank: int, local_rank: int, proc: Any, error_file: str, log_dir: str | None) -> None:
        r = _Rank(
            rank=rank,
            local_rank=local_rank,
            proc=proc,
            pid=proc.pid,
            pidfd=pidfd_of(proc.pid),
            prefix=output_prefix(self.plan, self.node, local_rank).encode(),
            error_file=error_file,
        )
        if log_dir:
            r.stdout_log = private_open(os.path.join(log_dir, f"rank{rank}.stdout.log"), "ab")
            r.stderr_log = private_open(os.path.join(log_dir, f"rank{rank}.stderr.log"), "ab")
        self.ranks.append(r)
        self.by_rank[rank] = r
        pipes = ((proc.stdout, self.out_sink, r.stdout_log), (proc.stderr, self.err_sink, r.stderr_log))
        for pipe, sink, log in pipes:
            assert pipe is not None  # Popen(stdout=PIPE) always gives one
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            relay = LineRelay(r.prefix, live=sink.live)
            self.streams[fd] = stream = _Stream(fd, pipe, r, relay, sink, log, is_err=pipe is proc.stderr)
            stream.collapse = self.collapses.get(sink.fd)
            r.streams.append(stream)
        if r.pidfd is not None:
            self.sel.register(r.pidfd, selectors.EVENT_READ, ("exit", r))

    def _cannot_start(self, rank: int, local_rank: int, program: str, exc: OSError) -> None:
        missing = isinstance(exc, FileNotFoundError)
        reason = exc.strerror or str(exc)
        self._apply(
            self.state.on_cannot_start(
                rank, local_rank, program, reason, missing=missing, now=time.monotonic(), wall=time.time()
            )
        )

    # ---- main loop ------------------------------------------------------
    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        old_wakeup = signal.set_wakeup_fd(wake_w)
        caught = (*ns.TEARDOWN_SIGNALS, *ns.FORWARD_SIGNALS, ns.STACKS)
        old_handlers = {s: signal.signal(s, lambda *_: None) for s in caught}
        self.sel.register(wake_r, selectors.EVENT_READ, ("signal", None))
        self.sel.register(self._sink_wake, selectors.EVENT_READ, ("sink", None))
        if self.control is not None:
            os.set_blocking(self.control.fileno(), False)
            self.sel.register(self.control.fileno(), selectors.EVENT_READ, ("control", None))
        for sink in self.sinks:
            sink.start()  # threads only now: the ranks were forked from a single-threaded process
        try:
            code = self._loop()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self._kill_leftovers()
            if self.progress is not None:
                self.progress.close()
            for held in self.collapses.values():
                held.flush()
        self._emit(wire.encode(wire.Done(node_rank=self.node.node_rank, code=code)))
        for sink in self.sinks:
            sink.wait_idle(ns.STALL if self.state.stopping else None)
        return code

    def _loop(self) -> int:
        while True:
            now = time.monotonic()
            code = self._settle(now)
            if code is not None:
                return code
            alive_at = time.time()
            ready = self.sel.select(self._timeout(now))
            self._round = ns.DeathWindow(alive_at, time.time())  # for a rank whose exit is in `ready`
            for key, _ in ready:
                self._dispatch(key)
            self._round = None
            for held in self.collapses.values():
                held.tick(time.monotonic())
            for r in self.ranks:
                if r.pidfd is None and not r.reaped:
                    self._reap(r, block=False)
            if self.progress is not None and not self.state.stopping:
                for event in self.progress.tick(time.monotonic()):
                    self._emit(wire.encode(event))

    def _settle(self, now: float) -> int | None:
        """What the state asks for before the wait; the exit code once it says the node is done."""
        while True:
            actions = self.state.tick(now, self._pipes)
            self._apply(actions)
            for action in actions:
                if isinstance(action, ns.Finish):
                    return action.code
            if not any(isinstance(action, ns.StopReading) for action in actions):
                return None  # else look again at once: the pipes were just closed

    def _timeout(self, now: float) -> float | None:
        """How long the next wait may be: the state's limit, a paused pipe's resumption, polls, the progress watch."""
        timeouts = [self._watch(now), self.state.wait_cap(now)]
        alive = self.state.alive
        if any(r.pidfd is None and not r.reaped for r in self.ranks):
            timeouts.append(_PID_POLL)
        if not alive:
            for sink in self.sinks:
                sink.want_wake = True  # waiting for pipes to close and output to drain
        if self.progress is not None and alive:
            timeouts.append(self.progress.due(now))
        timeouts.extend(max(0.0, due - now) for held in self.collapses.values() if (due := held.next_due()) is not None)
        known = [t for t in timeouts if t is not None]
        return min(known) if known else None

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        kind, what = key.data
        if kind == "pipe":
            if self.streams.get(key.fd) is what:  # not closed earlier in this round
                self._catch_up(self.streams[key.fd])
                self._read(self.streams[key.fd])
        elif kind == "exit":
            if not what.reaped:
                self._reap(what)
        elif kind == "control":
            self._read_control()
        elif kind == "signal":
            self._read_signals(key.fd)
        elif kind == "sink":
            drain(key.fd)

    def _flush_collapsed(self) -> None:
        """A rank failed: what its ranks' lines held prints before the failure is known, here or in the launcher."""
        for held in self.collapses.values():
            held.flush()
        if self._flush_mark:
            self.err_sink.put(self, [wire.FLUSH_LINE.encode() + b"\n"])

    def _apply(self, actions: Iterable[ns.Action]) -> None:
        for action in actions:
            if isinstance(action, ns.Emit):
                self._emit(wire.encode(action.event))
            elif isinstance(action, ns.Exited):
                if action.result.failed:
                    self._flush_collapsed()
                self._emit(wire.encode(action.result))
                _record_exit(action.result)
            elif isinstance(action, ns.Signal):
                for rank in action.ranks:
                    killpg(self.by_rank[rank].pid, action.sig)
            elif isinstance(action, ns.Stopping):
                get_logger("agent").info("stopping ranks", signal=signal.Signals(action.sig).name)
            elif isinstance(action, ns.RequestStacks):
                self._print_stacks()
            elif isinstance(action, ns.AbandonStalledReaders):
                self._give_up_stalled_readers()
            elif isinstance(action, ns.StopReading):
                self._kill_descendants()  # what holds the pipes open outlived its rank
                for stream in list(self.streams.values()):
                    self._close_stream(stream)

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
                wait = stream.resume_at - now
                resume = wait if resume is None else min(resume, wait)
        return resume

    def _give_up_stalled_readers(self) -> None:
        for sink in self.sinks:
            if not sink.dead and sink.stalled(ns.STALL):
                sink.abandon()
                get_logger("agent").info("output reader stalled while stopping: dropping rank output", fd=sink.fd)

    # ---- rank output ----------------------------------------------------
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
        now = time.monotonic()
        self.state.on_read(now)
        if not chunk:
            self._close_stream(stream)
            return 0
        if stream.log is not None:
            stream.log.write(chunk)
            stream.log.flush()
        if stream.is_err:
            stream.rank.tail = keep_tail(stream.rank.tail, chunk)
        if self.progress is not None:
            self.progress.output(stream.rank.rank, chunk, stream.is_err)
        pieces, bar = stream.relay.feed(chunk)
        stream.put(pieces, bar)
        if stream.relay.barred and len(chunk) < READ_SIZE:
            if not stream.roomy:
                stream.roomy = True
                enlarge_pipe(stream.fd)  # the rank writes on while we pause
            stream.resume_at = now + _BAR_PAUSE
        return len(chunk)

    def _close_stream(self, stream: _Stream) -> None:
        if stream.watched:
            self.sel.unregister(stream.fd)
        del self.streams[stream.fd]
        stream.pipe.close()
        stream.put(stream.relay.close(), None)

    # ---- rank exits -----------------------------------------------------
    def _reap(self, r: _Rank, block: bool = True) -> None:
        returncode = r.proc.wait() if block else r.proc.poll()
        if returncode is None:
            return
        r.reaped = True
        if self.progress is not None:
            self.progress.ended(r.rank)
        if r.pidfd is not None:
            self.sel.unregister(r.pidfd)
            os.close(r.pidfd)
            r.pidfd = None
        record = ErrorRecord()
        tail: tuple[str, ...] = ()
        if returncode:  # its last stderr lines may still be in the pipe: they belong in the summary
            self._read_last_stderr(r)
            record, tail = read_error_file(r.error_file, self.fs_clock_offset), tail_lines(r.tail)
        now, wall = time.monotonic(), time.time()
        self._apply(
            self.state.on_rank_exit(r.rank, returncode, record, stderr_tail=tail, now=now, wall=wall, died=self._round)
        )

    def _read_last_stderr(self, r: _Rank) -> None:
        for stream in [s for s in r.streams if s.is_err and s.fd in self.streams]:
            for _ in range(_TAIL_READS):
                if not self._read(stream):
                    break

    # ---- control and signals ---------------------------------------------
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
            self._apply(self.state.on_control(command, now=time.monotonic(), wall=time.time()))

    def stop(self) -> None:
        self._apply(self.state.on_control_closed(now=time.monotonic(), wall=time.time()))

    def _read_signals(self, fd: int) -> None:
        try:
            data = os.read(fd, 512)
        except BlockingIOError:
            return
        for signum in data:
            self._apply(self.state.on_signal(signum, now=time.monotonic(), wall=time.time()))

    def _print_stacks(self) -> None:
        """Every live rank prints its stack; the job goes on (agent/watch.py)."""
        if self.progress is None:
            return
        for held in self.collapses.values():
            held.pause_for_stacks(time.monotonic())
        for rank, text in self.progress.request_stacks():
            if rank in self.by_rank:
                self.err_sink.put(self, [self.by_rank[rank].prefix + text.encode() + b"\n"])

    # ---- the end ----------------------------------------------------------
    def _kill_leftovers(self) -> None:
        """Nothing the job started here outlives it: the ranks' sessions, every descendant (the agent is a
        subreaper, so double-forked daemons are among them), and, as a backstop, any process with this job's
        run id and node rank."""
        for r in self.ranks:
            killpg(r.pid, signal.SIGKILL)
            if not r.reaped:
                self._reap(r)
            for log in (r.stdout_log, r.stderr_log):
                if log is not None:
                    log.close()
        self._kill_descendants()
        procs.kill_job(self.plan.run_id, self.node.node_rank)

    def _kill_descendants(self) -> None:
        ranks = {r.pid for r in self.ranks}
        waiters = [w for r in self.ranks if (w := getattr(r.proc, "waiter", None))]  # warm ranks' (preload/warm.py)
        found = [pid for root in (os.getpid(), *waiters) for pid in procs.descendants(root) if pid not in ranks]
        for pid in found:
            kill(pid)
        for pid in found:  # adopted orphans are ours to reap; others are their parents' (also killed)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

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


def _record_exit(result: wire.RankExit) -> None:
    phases.record(
        "exit", rank=result.rank, local_rank=result.local_rank, pid=result.pid, code=result.code, signal=result.signal
    )


def _fresh_error_file(directory: str, rank: int) -> str:
    """Where the rank's bootstrap records a crash; a record left by an earlier attempt is removed."""
    error_file = os.path.join(directory, f"rank{rank}.error.json")
    try:
        os.unlink(error_file)
    except FileNotFoundError:
        pass
    return error_file
