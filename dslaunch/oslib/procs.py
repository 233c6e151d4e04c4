"""Finding a job's processes on this host, from ``/proc`` (Linux), never by name.

Every process of a job carries ``DSLAUNCH_RUN_ID`` (and each rank's ``NODE_RANK``) in its
environment, which its children inherit; a node agent is also a child subreaper, so what a
rank double-forks stays among the agent's descendants, and the local launcher is one too, so
what a killed agent leaves behind becomes its child (``kill_adopted``), environment or not.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Collection


def _ancestors(pid: int, proc: str) -> set[int]:
    found = set()
    while pid > 1:
        try:
            with open(f"{proc}/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        found.add(pid)
    return found


def job_pids(run_id: str, node_rank: int | None = None, proc: str = "/proc") -> list[int]:
    """Processes whose environment has ``DSLAUNCH_RUN_ID=run_id`` (and ``NODE_RANK=node_rank`` when given);
    never this process or its ancestors.

    Nodes of one job on one machine share the run id (``cli/run_ids.py``): ``node_rank`` keeps each node's sweep
    to its own ranks. A job started inside another's rank never has an enclosing job's run id (the CLI refuses
    one in ``DSLAUNCH_RUN_ID_CHAIN``, ``dslaunch/nesting.py``), so its sweep never matches their processes."""
    wanted = [f"DSLAUNCH_RUN_ID={run_id}".encode()]
    if node_rank is not None:
        wanted.append(f"NODE_RANK={node_rank}".encode())
    spared = {os.getpid(), *_ancestors(os.getpid(), proc)}
    found = []
    for entry in os.listdir(proc):
        if not (entry.isascii() and entry.isdigit()) or int(entry) in spared:
            continue
        try:
            with open(f"{proc}/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if all(item in env for item in wanted):
            found.append(int(entry))
    return found


def descendants(pid: int, proc: str = "/proc") -> list[int]:
    """Every live descendant of ``pid``, parents before children."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"{proc}/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"{proc}/{parent}/task/{tid}/children", encoding="ascii") as f:
                    children = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            found += children
            todo += children
    return found


def kill_job(run_id: str, node_rank: int | None = None, proc: str = "/proc") -> list[int]:
    """SIGKILL every process of the job here (of its node ``node_rank`` when given), as ``job_pids`` finds them, in
    one scan of ``/proc``; the pids signalled."""
    pids = job_pids(run_id, node_rank, proc)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return pids


def kill_adopted(known: Collection[int], proc: str = "/proc") -> list[int]:
    """SIGKILL every child of this process that it did not start itself (not in ``known``), with everything below
    it: as a child subreaper, this process adopts what a dead agent's ranks double-forked, found so even with no
    run id in its environment. Reaps the adopted children; returns the pids signalled."""
    me = os.getpid()
    adopted = [pid for pid in descendants_once(me, proc) if pid not in known]
    signalled = []
    for pid in adopted:
        for target in (pid, *descendants(pid, proc)):
            try:
                os.kill(target, signal.SIGKILL)
                signalled.append(target)
            except (ProcessLookupError, PermissionError):
                pass
    for pid in adopted:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return signalled


def descendants_once(pid: int, proc: str = "/proc") -> list[int]:
    """``pid``'s children."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"{proc}/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"{proc}/{pid}/task/{tid}/children", encoding="ascii") as f:
                found += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return found
