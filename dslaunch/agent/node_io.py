"""The node agent's small system calls (a rank's start, its error file, signals, the sweep, the events pipe), each
forgiving of a process or pipe that is already gone."""

from __future__ import annotations

import functools
import os
import signal
import sys
import time
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING

from dslaunch.oslib import prctl, procs

if TYPE_CHECKING:
    import subprocess

    from dslaunch import wire

_SAME_CLOCK = 0.05  # a file time this close to time.time() is this node's clock (the coarse one: a tick behind)


def rank_preexec(parent: int) -> None:  # in the child between fork and exec: prctl was resolved before the fork
    """A session of its own, and SIGKILL when ``parent`` (the agent) dies; if it died before the parent-death
    signal was set, no signal will come: the rank ends here, before it execs (it outlived its agent otherwise)."""
    os.setsid()
    prctl.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def popen_rank(argv: list[str], env: Mapping[str, str], cwd: str | None) -> subprocess.Popen[bytes]:
    """Start a rank in a session of its own, with a parent-death signal; its stdout and stderr on pipes."""
    import subprocess  # keep agent start-up lean

    return subprocess.Popen(
        argv,
        env=env,
        cwd=cwd or None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=functools.partial(rank_preexec, os.getpid()),
    )


def fresh_error_file(directory: str, rank: int) -> str:
    """Where the rank's bootstrap records a crash; a record left by an earlier attempt is removed."""
    error_file = os.path.join(directory, f"rank{rank}.error.json")
    try:
        os.unlink(error_file)
    except FileNotFoundError:
        pass
    return error_file


def pidfd_of(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def signal_pid(pid: int, sig: int) -> None:
    """``sig`` to this one process (not its group)."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(roots: Iterable[int], spared: Collection[int], within: float = 1.0) -> None:
    """SIGKILL every descendant of ``roots`` but the ``spared`` ones, and reap the orphans this process adopted.

    One scan of ``/proc`` cannot see what is forked after it: a process that forks between the scan and its SIGKILL
    (one that hops to a new pid all the time, the worst case) left a child no scan saw, alive. So each process is
    killed as soon as it is found, before its children are read (killed, it forks no more), and the tree is walked
    again until a walk finds nothing not killed before (for ``within`` seconds at most). The agent is a subreaper:
    whatever escaped one walk is still below it for the next."""
    roots, killed = tuple(roots), set[int]()
    deadline = time.monotonic() + within
    while True:
        found, todo = [], list(roots)
        while todo:
            for pid in procs.descendants_once(todo.pop()):  # its children
                if pid not in spared and pid not in killed:
                    kill(pid)
                    killed.add(pid)
                    found.append(pid)
                todo.append(pid)
        for pid in found:  # adopted orphans are ours to reap; others are their parents' (also killed)
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if not found or time.monotonic() > deadline:
            return


class CaughtSignals:
    """``signals`` caught, each one's number written to a pipe the node loop reads (``signal.set_wakeup_fd``), from
    before the first rank starts until the node has been swept: none takes its default action (death, for most) while
    there is anything to sweep. A lost launcher's news can come twice, a few ms apart: over ssh the channel's EOF and
    then the parent-death SIGTERM of sshd's exit, under pdsh the EOF and then the dial-back watcher's SIGHUP; the
    second, taken by default once the loop had ended, killed the agent halfway through its sweep and left what its
    ranks had double-forked alive (issue 55, docs/teardown.md)."""

    def __init__(self, signals: Iterable[int]) -> None:
        self.fd, self._write = os.pipe()
        for fd in (self.fd, self._write):
            os.set_blocking(fd, False)
        self._old_wakeup = signal.set_wakeup_fd(self._write)
        self._old = {s: signal.signal(s, _noted) for s in signals}

    def release(self) -> None:
        """The old handlers back; a signal that came since the loop last read the pipe is dropped: the node is done."""
        signal.set_wakeup_fd(self._old_wakeup)
        for s, handler in self._old.items():
            signal.signal(s, handler)
        os.close(self.fd)
        os.close(self._write)


def _noted(_signum: int, _frame: object) -> None:
    """The wakeup pipe has the signal's number: the node loop acts on it there."""


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd``; nothing once its reader is gone."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass


def write_attempt_end(*fds: int) -> None:
    """``wire.ATTEMPT_END`` on each of ``fds``, after what Python still buffered: the launcher takes what came before
    it on that stream as all there (a launcher gone: nothing)."""
    from dslaunch import wire

    sys.stdout.flush()
    sys.stderr.flush()
    for fd in fds:
        write_all(fd, (wire.ATTEMPT_END + "\n").encode())


def fs_clock_offset(directory: str) -> float:
    """How far ahead of ``time.time()`` the clock that stamps files in ``directory`` runs (a network file system's
    server clock; here, the kernel's coarse clock: a tick at most); 0.0 when it cannot be told."""
    probe = os.path.join(directory, f".dslaunch-clock.{os.getpid()}")
    try:
        before = time.time()
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        after = time.time()
        try:
            changed = os.fstat(fd).st_ctime_ns / 1e9
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError:
        return 0.0
    if before - _SAME_CLOCK <= changed <= after + _SAME_CLOCK:
        return 0.0  # this node's clock, give or take a tick: a single sample would only add its noise
    return changed - (before + after) / 2


def log_debug(event: str, argv: list[str], **kw: object) -> None:
    from dslaunch.logs import get_logger

    log = get_logger("agent")
    if log.is_enabled_for(10):
        import shlex

        from dslaunch.masking import mask

        log.debug(event, command=mask(shlex.join(argv)), **kw)


def record_exit(result: wire.RankExit) -> None:
    """A rank's end in the launch timeline."""
    from dslaunch.logs import phases

    phases.record(
        "exit", rank=result.rank, local_rank=result.local_rank, pid=result.pid, code=result.code, signal=result.signal
    )


def read_ready(fd: int, size: int = 4096) -> bytes | None:
    """What a non-blocking fd holds: None when nothing yet; b"" at its end (a reset connection too)."""
    try:
        return os.read(fd, size)
    except BlockingIOError:
        return None
    except OSError:
        return b""
