"""The node agent's small system calls, each forgiving of a process or pipe that is already gone."""

from __future__ import annotations

import fcntl
import os
import signal

from dslaunch import _prctl

_BAR_PIPE = 256 << 10  # 64 ranks drawing bars stay well inside the default per-user pipe quota (64 MiB)


def rank_preexec() -> None:  # runs in the child between fork and exec: prctl was resolved before the fork
    os.setsid()
    _prctl.set_parent_death_signal(signal.SIGKILL)


def enlarge_pipe(fd: int) -> None:
    """Let a pipe hold ``_BAR_PIPE`` bytes (Linux), so pausing its reader rarely blocks the writer."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _BAR_PIPE)
    except OSError:
        pass  # over the user's pipe-size limits: the pipe keeps its size


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return a == b
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


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


def killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
