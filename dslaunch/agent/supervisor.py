"""Spawn one node's ranks and supervise them in a single selector loop.

Every rank is its own session (so a signal reaches the rank's children too)
and carries a parent-death signal, so nothing survives a SIGKILLed agent.
The loop wakes on rank output, rank exit (pidfd), the control channel and
signals; the first failing rank makes every other rank get SIGTERM at once
and SIGKILL after the grace period.
"""

from __future__ import annotations

import collections
import ctypes
import json
import os
import selectors
import signal
import time
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from dslaunch import wire
from dslaunch.agent import ranks as rankspec
from dslaunch.logs import get_logger
from dslaunch.plan import LaunchPlan

_PR_SET_PDEATHSIG = 1
_STDERR_TAIL = 20
_TEARDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_FORWARD_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def _log_debug(event: str, argv: list[str], **kw: object) -> None:
    log = get_logger("agent")
    if log.is_enabled_for(10):
        import shlex

        from dslaunch.masking import mask

        log.debug(event, command=mask(shlex.join(argv)), **kw)


def set_parent_death_signal(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _rank_preexec() -> None:  # runs in the child between fork and exec
    os.setsid()
    set_parent_death_signal(signal.SIGKILL)


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
    partial: dict[int, bytes] = field(default_factory=dict)
    tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=_STDERR_TAIL))
    signalled: bool = False
    returncode: int | None = None


class NodeSupervisor:
    def __init__(
        self, plan: LaunchPlan, node_rank: int, *, control: BinaryIO | None, out: IO[bytes], err: IO[bytes]
    ) -> None:
        self.plan = plan
        self.node = plan.node(node_rank)
        self.control = control
        self.out = out
        self.err = err
        self.ranks: list[_Rank] = []
        self.sel = selectors.DefaultSelector()
        self.stop_deadline: float | None = None
        self.root_cause: wire.RankExit | None = None
        self.stop_signal: int | None = None
        self.pipes_open = 0
        self._control = wire.ControlReader()

    # ---- spawning -------------------------------------------------------
    def start(self, error_dir: str) -> None:
        import subprocess  # keep agent start-up lean

        log_dir = self.plan.log_dir
        if log_dir:
            os.makedirs(log_dir, exist_ok=True)
        for local_rank, rank in enumerate(self.node.ranks):
            error_dir_for_rank = log_dir or error_dir
            error_file = os.path.join(error_dir_for_rank, f"rank{rank}.error.json")
            try:
                os.unlink(error_file)
            except FileNotFoundError:
                pass
            env = rankspec.rank_env(self.plan, self.node, local_rank, os.environ, error_file)
            argv = rankspec.rank_argv(self.plan, local_rank, self.node)
            proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self.plan.cwd or None,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                preexec_fn=_rank_preexec,
            )
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
            for stream, sink in ((proc.stdout, self.out), (proc.stderr, self.err)):
                assert stream is not None  # Popen(stdout=PIPE) always gives one
                os.set_blocking(stream.fileno(), False)
                self.sel.register(stream.fileno(), selectors.EVENT_READ, ("pipe", r, sink))
                self.pipes_open += 1
            if r.pidfd is not None:
                self.sel.register(r.pidfd, selectors.EVENT_READ, ("exit", r, None))
            self._emit(wire.encode(wire.Spawned(rank=rank, local_rank=local_rank, pid=proc.pid, host=self.node.host)))
            _log_debug("rank started", rank=rank, local_rank=local_rank, pid=proc.pid, argv=argv)

    # ---- main loop ------------------------------------------------------
    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        old_wakeup = signal.set_wakeup_fd(wake_w)
        old_handlers = {s: signal.signal(s, lambda *_: None) for s in (*_TEARDOWN_SIGNALS, *_FORWARD_SIGNALS)}
        self.sel.register(wake_r, selectors.EVENT_READ, ("signal", None, None))
        if self.control is not None:
            os.set_blocking(self.control.fileno(), False)
            self.sel.register(self.control.fileno(), selectors.EVENT_READ, ("control", None, None))
        try:
            self._loop()
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for s, h in old_handlers.items():
                signal.signal(s, h)
            self._kill_leftovers()
        code = self._exit_code()
        self._emit(wire.encode(wire.Done(node_rank=self.node.node_rank, code=code)))
        return code

    def _loop(self) -> None:
        while True:
            alive = [r for r in self.ranks if r.returncode is None]
            if not alive and self.pipes_open == 0:
                return
            timeout = 0.05 if any(r.pidfd is None for r in alive) else None
            if not alive:
                timeout = 0.5  # ranks are gone; give a grandchild holding a pipe a moment
            if self.stop_deadline is not None and alive:
                remaining = self.stop_deadline - time.monotonic()
                if remaining <= 0:
                    for r in alive:
                        _killpg(r.pid, signal.SIGKILL)
                    remaining = 0.05
                timeout = remaining if timeout is None else min(timeout, remaining)
            ready = self.sel.select(timeout)
            if not ready and not alive:
                return
            for key, _ in ready:
                kind, r, sink = key.data
                if kind == "pipe":
                    self._read_pipe(key.fd, r, sink)
                elif kind == "exit":
                    self._reap(r)
                elif kind == "control":
                    self._read_control()
                elif kind == "signal":
                    self._read_signals(key.fd)
            for r in alive:
                if r.pidfd is None and r.returncode is None:
                    self._reap(r, block=False)

    def _read_pipe(self, fd: int, r: _Rank, sink: IO[bytes]) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        is_err = sink is self.err
        log = r.stderr_log if is_err else r.stdout_log
        if log is not None and chunk:
            log.write(chunk)
            log.flush()
        data = r.partial.pop(fd, b"") + chunk
        if not chunk:
            self.sel.unregister(fd)
            os.close(fd)
            self.pipes_open -= 1
            if data:
                self._write_lines(r, sink, [data], is_err)
            return
        *lines, rest = data.split(b"\n")
        if rest:
            r.partial[fd] = rest
        if lines:
            self._write_lines(r, sink, lines, is_err)

    def _write_lines(self, r: _Rank, sink: IO[bytes], lines: list[bytes], is_err: bool) -> None:
        if is_err:
            r.tail.extend(line.decode("utf-8", "replace") for line in lines)
        payload = b"".join(r.prefix + line + b"\n" for line in lines)
        try:
            sink.write(payload)
            sink.flush()
        except (BrokenPipeError, ValueError):
            pass

    def _reap(self, r: _Rank, block: bool = True) -> None:
        proc = r.proc
        returncode = proc.wait() if block else proc.poll()  # type: ignore[attr-defined]
        if returncode is None:
            return
        r.returncode = returncode
        if r.pidfd is not None:
            self.sel.unregister(r.pidfd)
            os.close(r.pidfd)
            r.pidfd = None
        code, signame = wire.exit_code_of(returncode)
        result = wire.RankExit(
            rank=r.rank,
            local_rank=r.local_rank,
            node_rank=self.node.node_rank,
            host=self.node.host,
            pid=r.pid,
            code=code,
            signal=signame,
            ts=time.time(),
            by_agent=r.signalled,
            error=_read_error_file(r.error_file) if code else None,
            stderr_tail=tuple(r.tail) if code else (),
        )
        self._emit(wire.encode(result))
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
            elif isinstance(command, int):  # from a remote launcher, which cannot signal us
                for r in self.ranks:
                    if r.returncode is None:
                        _killpg(r.pid, command)

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
            if signum in _FORWARD_SIGNALS:
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
                _killpg(r.pid, sig)

    def _kill_leftovers(self) -> None:
        """Ranks are session leaders: kill whatever is left in their sessions."""
        for r in self.ranks:
            _killpg(r.pid, signal.SIGKILL)
            if r.returncode is None:
                self._reap(r)
            for log in (r.stdout_log, r.stderr_log):
                if log is not None:
                    log.close()

    def _exit_code(self) -> int:
        if self.root_cause is not None:
            return self.root_cause.code
        if self.stop_signal is not None:
            return 128 + self.stop_signal
        failed = [r for r in self.ranks if r.returncode]
        return wire.exit_code_of(failed[0].returncode)[0] if failed and failed[0].returncode else 0

    def _emit(self, line: str) -> None:
        try:
            self.out.write(line.encode())
            self.out.flush()
        except (BrokenPipeError, ValueError):
            pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_error_file(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data.get("traceback") if isinstance(data, dict) else None
