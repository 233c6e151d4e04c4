"""A running job's state for ``dslaunch --report LOGDIR`` (docs/observability.md): the observer writes
``LOGDIR/status.json`` every second and at the end (:func:`write`); the report reads it (:func:`read`) and says it
in one line (:func:`line`), with how old it is and whether the launcher that writes it is still alive.

:func:`snapshot` and :func:`line` are pure; a write is atomic (a temporary file renamed over the last one), so a
reader never sees half a state.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dslaunch.observe.figures import JobFigures

FILE = "status.json"
MAX_BYTES = 64 * 1024
EVERY = 1.0  # seconds between two writes while the job runs
_ENDED = ("succeeded", "failed")


def snapshot(f: JobFigures, wall: float, pid: int) -> dict[str, Any]:
    """What the status file holds: the job's figures, the slowest rank of the step (if one was timed), the wall
    time and the launcher's pid."""
    out: dict[str, Any] = {
        "state": f.state,
        "attempt": f.attempt,
        "restarts": sum(f.restarts.values()),
        "ranks": f.ranks,
        "ranks_alive": f.ranks_alive,
        "nodes": f.nodes,
        "nodes_lost": f.nodes_lost,
        "step": f.step,
        "steps_per_second": round(f.step_rate, 3),
        "stragglers": f.stragglers,
        "started": f.started,
        "wall": {phase: round(seconds, 3) for phase, seconds in f.wall_split(wall).items()},
        "updated": wall,
        "pid": pid,
    }
    if f.regions:
        # the widest gap, in seconds: a rank that waits for a slow one shows a high ratio in its collective, but
        # the slow rank's own region holds the larger gap
        worst = max(f.regions, key=lambda r: r.max - r.median)
        out["slowest"] = {
            "region": worst.region,
            "rank": worst.slowest_rank,
            "host": worst.slowest_host,
            "seconds": round(worst.max, 4),
            "median": round(worst.median, 4),
        }
    return out


def line(status: dict[str, Any], wall: float, alive: bool) -> str:
    """The state in one line, e.g. ``running: attempt 1, step 1234 (5.10 steps/s), 16 of 16 ranks alive, 0
    restarts, slowest rank 5 on b (forward 0.210 s, median 0.105 s); updated 0.4 s ago``."""
    state = str(status.get("state", "?"))
    parts = [f"attempt {int(status.get('attempt', 0)) + 1}"]
    if status.get("step"):
        parts.append(f"step {status['step']} ({float(status.get('steps_per_second', 0)):.2f} steps/s)")
    parts.append(f"{status.get('ranks_alive', '?')} of {status.get('ranks', '?')} ranks alive")
    parts.append(f"{status.get('restarts', 0)} restarts")
    parts.extend(_lost_and_slowest(status, "{rank} on {host} ({times})"))
    age = max(0.0, wall - float(status.get("updated", wall)))
    text = f"{state}: {', '.join(parts)}; updated {age:.1f} s ago"
    if state not in _ENDED and not alive:
        text += f" (its launcher, pid {status.get('pid')}, is gone: it ended without writing its end)"
    return text


def status_line(status: dict[str, Any], wall: float) -> str:
    """The terminal's status line (``--status-line``), e.g. ``dslaunch: step 812 (19.9 steps/s) | 16/16 ranks |
    0 restarts | slowest rank 5 on b: forward 0.210 s, median 0.105 s | 1:02:03``."""
    parts = (
        [f"step {status['step']} ({float(status.get('steps_per_second', 0)):.1f} steps/s)"]
        if status.get("step")
        else []
    )
    state = str(status.get("state", "?"))
    if not parts or state != "running":
        parts.insert(0, state)
    parts.append(f"{status.get('ranks_alive', '?')}/{status.get('ranks', '?')} ranks")
    restarts = int(status.get("restarts", 0))
    parts.append(f"{restarts} restart{'' if restarts == 1 else 's'}")
    parts.extend(_lost_and_slowest(status, "{rank} on {host}: {times}"))
    elapsed = int(max(0.0, wall - float(status.get("started", wall))))
    parts.append(f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}")
    return "dslaunch: " + " | ".join(parts)


def _lost_and_slowest(status: dict[str, Any], shape: str) -> list[str]:
    """The lost nodes and the slowest rank, as both lines say them (``shape`` places the rank, host and times)."""
    parts = [f"{status['nodes_lost']} nodes lost"] if status.get("nodes_lost") else []
    slow = status.get("slowest")
    if isinstance(slow, dict):
        seconds, median = float(slow.get("seconds", 0)), float(slow.get("median", 0))
        times = f"{slow.get('region')} {seconds:.3f} s, median {median:.3f} s"
        parts.append("slowest rank " + shape.format(rank=slow.get("rank"), host=slow.get("host"), times=times))
    return parts


def write(log_dir: str, status: dict[str, Any]) -> None:
    """Replace ``LOGDIR/status.json`` at once; a full disk or a removed folder only skips this write."""
    path = os.path.join(log_dir, FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)  # as private as the logs
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(status, separators=(",", ":")) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass


def read(log_dir: str) -> dict[str, Any] | None:
    """The status file's content (None: none, unreadable, or not a state this module wrote)."""
    try:
        with open(os.path.join(log_dir, FILE), "rb") as f:
            data = f.read(MAX_BYTES + 1)
        status = json.loads(data) if len(data) <= MAX_BYTES else None
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and isinstance(status.get("updated"), (int, float)) else None


def launcher_alive(status: dict[str, Any]) -> bool:
    pid = status.get("pid")
    if type(pid) is not int or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
