"""The node agent's small system calls, each forgiving of a process or pipe that is already gone."""

from __future__ import annotations

import os
import signal
import time

from dslaunch.oslib import prctl

_SAME_CLOCK = 0.05  # a file time this close to time.time() is this node's clock (the coarse one: a tick behind)


def rank_preexec() -> None:  # runs in the child between fork and exec: prctl was resolved before the fork
    os.setsid()
    prctl.set_parent_death_signal(signal.SIGKILL)


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
