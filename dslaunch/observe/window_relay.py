"""The node agent's side of the job-wide breakdown: each rank's window file, polled, relayed as events.

On when the launcher asked for windows (``DSLAUNCH_WINDOW_STEPS`` in the plan's environment). Each rank gets a
file of ``record.FILE_SIZE`` bytes; every :data:`POLL` seconds (a quarter second: a straggler is named within a
few steps of its window) the agent reads the slots written since its last look. It sends its ranks' windows of
one number together, as one ``wire.NodeWindows`` (issue 54: one event a node, not one a rank, so the launcher or a
pods' coordinator reads a node's ranks at once), once every rank has written that window or moved past it, or at
the next poll (a rank that is behind or has ended holds the others back a quarter second at most).
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
        self.held: dict[int, list[tuple[int, record.Window]]] = {}  # window number -> (rank, its window), in order
        self.waited: set[int] = set()  # window numbers held since the previous poll

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
        for f in self.files:
            for seq, payload in record.read_new(f.fd, f.seen):
                f.seen = seq
                w = record.decode(payload)
                if w is not None and w.index == seq:
                    self.held.setdefault(w.index, []).append((f.rank, w))
        reached = min(f.seen for f in self.files)
        ready = sorted(index for index in self.held if index <= reached or index in self.waited)
        events: list[wire.Event] = [node_windows(self.node_rank, index, self.held.pop(index)) for index in ready]
        self.waited = set(self.held)
        return events

    def close(self) -> None:
        for f in self.files:
            try:
                os.close(f.fd)
            except OSError:
                pass


MAX_REGIONS = 64  # region names in one event (a node's ranks may time different ones): what the wire takes


def node_windows(node_rank: int, index: int, got: list[tuple[int, record.Window]]) -> wire.NodeWindows:
    """One node's ranks' windows of one number as one event: columns, a place per rank; a region some ranks did not
    time lists the places of those that did. A region a rank names twice is added up (as the launcher would)."""
    per_rank: list[dict[str, tuple[float, float]]] = []
    names: dict[str, None] = {}  # in order of first appearance
    for _, w in got:
        regions: dict[str, tuple[float, float]] = {}
        for r in w.regions:
            total, best = regions.get(r.name, (0.0, r.fastest))
            regions[r.name] = (total + r.total, min(best, r.fastest))
            names.setdefault(r.name, None)
        per_rank.append(regions)
    kept = list(names)[:MAX_REGIONS]
    who, totals, fastest = [], [], []
    for name in kept:
        places = tuple(place for place, regions in enumerate(per_rank) if name in regions)
        who.append(() if len(places) == len(got) else places)
        totals += [per_rank[place][name][0] for place in places]
        fastest += [per_rank[place][name][1] for place in places]
    firsts = [w.first_step_at for _, w in got if w.first_step_at]
    return wire.NodeWindows(
        node_rank,
        index,
        ranks=tuple(rank for rank, _ in got),
        step=tuple(w.step for _, w in got),
        steps=tuple(w.steps for _, w in got),
        wall=tuple(w.wall for _, w in got),
        regions=tuple(kept),
        who=tuple(who),
        totals=tuple(totals),
        fastest=tuple(fastest),
        first_step_at=min(firsts, default=0.0),
    )
