"""A warm zygote's side of warm restarts (warm.py): each rank's waiter, and the exit-code pipe.

The waiter is the intermediate process of the zygote's double fork, kept: the rank's parent and a child
subreaper, it writes the rank's exit code on a pipe the agent reads, and when the agent is gone it ends the
rank's process group and everything below itself, and exits.
"""

from __future__ import annotations

import os
import select
import signal
import socket
from collections.abc import Sequence

from dslaunch.oslib import prctl

_KILLED = -signal.SIGKILL  # the code of a rank whose waiter died before it could say


def read_status(fd: int, block: bool) -> int | None:
    """A waiter's report of its rank's exit code (None: not yet, when not ``block``)."""
    if not block and not select.select([fd], [], [], 0)[0]:
        return None
    data = b""
    while chunk := os.read(fd, 64):
        data += chunk
    os.close(fd)
    try:
        return int(data)
    except ValueError:
        return _KILLED


def prepare_zygote() -> None:
    """In a warm zygote, once: its waiters are reaped by the kernel (they exit with their agents, any time)."""

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)


def become_waiter() -> None:
    """In the intermediate process, before it forks the rank."""
    zygote = os.getppid()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the zygote's SIG_IGN would reap the rank for us
    prctl.set_child_subreaper()
    prctl.set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != zygote:
        os._exit(1)


def wait_as_waiter(rank: int, agent: int, fds: Sequence[int], sock: socket.socket) -> None:
    """Report the rank's exit code on the status pipe (``fds[3]``); when the agent is gone, end what is left."""
    sock.close()
    for fd in fds[:3]:
        os.close(fd)
    status = fds[3]
    try:
        agent_fd: int | None = os.pidfd_open(agent)
    except OSError:
        agent_fd = None  # gone already
    rank_fd = os.pidfd_open(rank)
    code: int | None = None
    while agent_fd is not None:
        ready = select.select([agent_fd, *([rank_fd] if code is None else [])], [], [], 1.0)[0]
        code = _reap(rank, code)
        if code is not None and status >= 0:
            os.write(status, str(code).encode())
            os.close(status)
            status = -1
        if agent_fd in ready:
            break
    _end_all(rank)
    os._exit(0)


def _reap(rank: int, code: int | None) -> int | None:
    """Reap what has ended below this waiter; the rank's exit code once it has."""
    while True:
        try:
            pid, wstatus = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == rank:
            code = os.waitstatus_to_exitcode(wstatus)


def _end_all(rank: int) -> None:
    from dslaunch.oslib import procs

    try:
        os.killpg(rank, signal.SIGKILL)
    except OSError:
        pass
    for pid in procs.descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    outlive_waiters()


def outlive_waiters() -> None:
    """Wait until every child has ended (the zygote's waiters; a waiter's adopted orphans)."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return
        except InterruptedError:
            continue
