"""Room for what a flat launcher holds per host: the soft RLIMIT_NOFILE and RLIMIT_NPROC, raised toward the hard.

The ssh runner keeps a socket per host for the whole job (and a spill file per host whose output backs up) and
four threads per host (paramiko's transport, the output pump, its lane, the stderr relay); the pdsh runner's pdsh
(which inherits our limits, as its ssh clients do) keeps two pipes, a thread and an ssh client per host. The usual
soft limits (1,024 files; 4,096 tasks for users on RHEL-family systems, where RLIMIT_NPROC counts every thread of
the user) would fail a job of a few hundred or a thousand hosts in the middle of its start ("Too many open files",
"can't start new thread"). Only soft limits move, only up, only as far as the job needs (children inherit them).
"""

from __future__ import annotations

import resource
from dataclasses import dataclass


@dataclass(frozen=True)
class Need:
    limit: int  # resource.RLIMIT_*
    what: str
    per_host: int  # asked for
    least_per_host: int  # surely held: below this, warn
    headroom: int  # the interpreter, logs, pipes; for tasks, the user's other processes too
    hard_flag: str  # ulimit's
    setting: str  # where an admin raises the hard limit


FILES = Need(resource.RLIMIT_NOFILE, "open files", 4, 2, 256, "-Hn", "limits.conf nofile, LimitNOFILE=")
TASKS = {  # by runner
    "ssh": Need(resource.RLIMIT_NPROC, "threads and processes", 5, 4, 1024, "-Hu", "limits.conf nproc, TasksMax="),
    "pdsh": Need(resource.RLIMIT_NPROC, "threads and processes", 3, 2, 1024, "-Hu", "limits.conf nproc, TasksMax="),
}


def needed(hosts: int, need: Need = FILES, *, least: bool = False) -> int:
    return need.headroom + (need.least_per_host if least else need.per_host) * hosts


def new_soft_limit(want: int, soft: int, hard: int) -> int | None:
    """The soft limit to set so that ``want`` fit (never above ``hard``), or None to leave it."""
    infinite = resource.RLIM_INFINITY
    if soft == infinite or soft >= want:
        return None
    target = want if hard == infinite else min(want, hard)
    return target if target > soft else None


def shortfall(hosts: int, soft: int, need: Need = FILES) -> str | None:
    """The warning for a job that needs more than even the hard limit lets us have."""
    want = needed(hosts, need, least=True)
    if soft == resource.RLIM_INFINITY or soft >= want:
        return None
    return (
        f"dslaunch: {hosts} hosts may need about {want} {need.what}, but the limit is {soft} (ulimit {need.hard_flag}"
        f"): the job may fail to start on some hosts; raise the hard limit ({need.setting})\n"
    )


def make_room(hosts: int, runner: str = "ssh") -> list[str]:
    """Raise our soft limits for a job on ``hosts`` hosts; the warnings for those that still fall short."""
    warnings = []
    for need in (FILES, TASKS[runner]):
        soft, hard = resource.getrlimit(need.limit)
        target = new_soft_limit(needed(hosts, need), soft, hard)
        if target is not None:
            try:
                resource.setrlimit(need.limit, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass
        if warning := shortfall(hosts, soft, need):
            warnings.append(warning)
    return warnings
