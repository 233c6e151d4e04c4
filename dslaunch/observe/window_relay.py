"""The node agent's side of the job-wide breakdown: each rank's window file, polled, relayed as events.

On when the launcher asked for windows (``DSLAUNCH_WINDOW_STEPS`` in the plan's environment). Each rank gets a
file of ``record.FILE_SIZE`` bytes; every :data:`POLL` seconds (a quarter second: a straggler is named within a
few steps of its window) the agent reads the slots written since its last look and sends one
``wire.TimerWindow`` per new window: a few reads a second per rank, one small event per rank and window.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.observe import record
from dslaunch.plan import LaunchPlan

POLL = 0.25


@dataclass
class _RankFile:
    rank: int
    fd: int
    seen: int = 0


def window_steps(plan: LaunchPlan) -> int | None:
    """The window the launcher asked for (steps); None: no windows."""
    value = dict(plan.env).get(record.ENV_STEPS)
    return int(value) if value and value.isdigit() and int(value) > 0 else None


class WindowRelay:
    def __init__(self, node_rank: int) -> None:
        self.node_rank = node_rank
        self.files: list[_RankFile] = []
        self.next_poll = 0.0

    def add(self, rank: int, env: dict[str, str], run_dir: str) -> None:
        path = os.path.join(run_dir, f"rank{rank}.windows")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            os.ftruncate(fd, record.FILE_SIZE)
        except OSError:
            return  # this rank's windows are not seen; the job goes on
        self.files.append(_RankFile(rank, fd))
        env[record.ENV_FILE] = path

    def due(self, now: float) -> float | None:
        return max(0.0, self.next_poll - now) if self.files else None

    def tick(self, now: float) -> list[wire.Event]:
        if now < self.next_poll or not self.files:
            return []
        self.next_poll = now + POLL
        events: list[wire.Event] = []
        for f in self.files:
            for seq, payload in record.read_new(f.fd, f.seen):
                f.seen = seq
                w = record.decode(payload)
                if w is None or w.index != seq:
                    continue
                regions = tuple((r.name, r.total, r.fastest) for r in w.regions)
                events.append(
                    wire.TimerWindow(self.node_rank, f.rank, w.index, w.step, w.steps, w.wall, regions, w.first_step_at)
                )
        return events

    def close(self) -> None:
        for f in self.files:
            try:
                os.close(f.fd)
            except OSError:
                pass
