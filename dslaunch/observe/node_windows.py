"""Nodes' windows as columns (pure): the launcher's side of the fan-in (issue 54).

A node agent sends its ranks' windows of one number as one ``wire.NodeWindows``: columns, a place per rank. The
launcher (a pods' coordinator: thousands of them a window) keeps them as they came and reads a whole window, or a
whole breakdown period, a column at a time: each node's places are divided, added and appended with ``map`` and
``list.extend`` (in C), so its work grows with the nodes, not with each rank's regions in Python. The figures are
those of ``breakdown.RankTotals`` fed rank by rank, the same sums in the same order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import add, sub, truediv

from dslaunch import wire
from dslaunch.observe.breakdown import STEP, Column


def one_rank(w: wire.TimerWindow) -> wire.NodeWindows:
    """A single rank's window as a node's (a region it names twice added up, as ``RankTotals`` does)."""
    regions: dict[str, tuple[float, float]] = {}
    for name, total, fastest in w.regions:
        before = regions.get(name)
        regions[name] = (total, fastest) if before is None else (before[0] + total, min(before[1], fastest))
    return wire.NodeWindows(
        w.node_rank,
        w.index,
        (w.rank,),
        (w.step,),
        (w.steps,),
        (w.wall,),
        tuple(regions),
        ((),) * len(regions),
        tuple(t for t, _ in regions.values()),
        tuple(f for _, f in regions.values()),
        w.first_step_at,
    )


def subset(w: wire.NodeWindows, keep: Sequence[int]) -> wire.NodeWindows:
    """``w`` with only the ranks at places ``keep`` (in that order)."""
    again = {old: new for new, old in enumerate(keep)}
    names, whos, totals, fastest = [], [], [], []
    for name, who, seconds, best in w.columns():
        kept = sorted((again[p], t, f) for p, t, f in zip(who or range(len(w.ranks)), seconds, best) if p in again)
        if kept:
            names.append(name)
            whos.append(tuple(p for p, _, _ in kept) if len(kept) < len(keep) else ())
            totals += [t for _, t, _ in kept]
            fastest += [f for _, _, f in kept]
    return wire.NodeWindows(
        w.node_rank,
        w.index,
        tuple(w.ranks[p] for p in keep),
        tuple(w.step[p] for p in keep),
        tuple(w.steps[p] for p in keep),
        tuple(w.wall[p] for p in keep),
        tuple(names),
        tuple(whos),
        tuple(totals),
        tuple(fastest),
        w.first_step_at,
    )


@dataclass
class WindowColumns:
    """One complete window of the job: each region's column (:data:`STEP`: each rank's wall time per step), every
    rank's wall time and steps per second, and the steps it spans."""

    regions: dict[str, Column]
    walls: list[float]
    rates: list[float]
    first: int
    last: int

    @property
    def count(self) -> int:
        """The ranks that sent it."""
        return len(self.regions[STEP].ranks)


def window_columns(parts: Iterable[wire.NodeWindows]) -> WindowColumns:
    step = Column()
    regions = {STEP: step}
    walls: list[float] = []
    rates: list[float] = []
    first, last = -1, 0
    for p in parts:
        ranks, steps, wall = p.ranks, p.steps, p.wall
        per_step = list(map(truediv, wall, steps))
        step.ranks.extend(ranks)
        step.average.extend(per_step)
        step.fastest.extend(per_step)
        walls.extend(wall)
        rates.extend(map(truediv, steps, wall) if 0.0 not in wall else (s / w for s, w in zip(steps, wall) if w))
        last = max(last, *p.step)
        begun = min(map(sub, p.step, steps)) + 1
        first = begun if first < 0 else min(first, begun)
        for name, who, totals, fastest in p.columns():
            column = regions.get(name) or regions.setdefault(name, Column())
            if who:
                column.ranks.extend([ranks[i] for i in who])
                column.average.extend(map(truediv, totals, [steps[i] for i in who]))
            else:
                column.ranks.extend(ranks)
                column.average.extend(map(truediv, totals, steps))
            column.fastest.extend(fastest)
    return WindowColumns(regions, walls, rates, max(first, 0), last)


@dataclass
class _Sums:
    """One node's ranks (as they came in one event) over a period: steps, wall time and each region's seconds, a
    place per rank; ``timed``: the places that timed a region, None for every one. Tuples, not lists: a tuple of
    numbers is one the cyclic garbage collector stops tracking, and a coordinator holds one per node and region."""

    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    wall: tuple[float, ...]
    totals: dict[str, tuple[float, ...]] = field(default_factory=dict)
    timed: dict[str, set[int] | None] = field(default_factory=dict)


class Period:
    """The breakdown's running period: each window's nodes added up, column by column."""

    def __init__(self) -> None:
        self.sums: dict[tuple[int, ...], _Sums] = {}  # by the ranks of an event (one node's, nearly always all)

    def __bool__(self) -> bool:
        return bool(self.sums)

    def add(self, w: wire.NodeWindows) -> None:
        n = len(w.ranks)
        sums = self.sums.get(w.ranks)
        if sums is None:
            sums = self.sums[w.ranks] = _Sums(w.ranks, (0,) * n, (0.0,) * n)
        sums.steps = tuple(map(add, sums.steps, w.steps))
        sums.wall = tuple(map(add, sums.wall, w.wall))
        for name, who, totals, _ in w.columns():
            held = sums.totals.get(name) or (0.0,) * n
            if who:
                some = list(held)
                for place, seconds in zip(who, totals):
                    some[place] += seconds
                held = tuple(some)
                timed = sums.timed.get(name, set())
                if timed is not None:
                    sums.timed[name] = timed | set(who)
            else:
                held = tuple(map(add, held, totals))
                sums.timed[name] = None
            sums.totals[name] = held

    def columns(self) -> dict[str, Column]:
        """Each rank's seconds per step over the period, per region (the figures ``RankTotals.per_step`` gives)."""
        parts = list(self.sums.values())
        if sum(len(s.ranks) for s in parts) != len(set().union(*(s.ranks for s in parts))):
            # a node's ranks came split over two events of a window: add those ranks up one by one
            twice = {r for r, n in Counter(r for s in parts for r in s.ranks).items() if n > 1}
            parts = [_without(s, twice) for s in parts] + _merged(parts, twice)
        regions: dict[str, Column] = {STEP: Column()}
        for s in parts:
            step = regions[STEP]
            step.ranks.extend(s.ranks)
            step.average.extend(map(truediv, s.wall, s.steps))
            for name, held in s.totals.items():
                column = regions.setdefault(name, Column())
                timed = s.timed[name]
                if timed is None:
                    column.ranks.extend(s.ranks)
                    column.average.extend(map(truediv, held, s.steps))
                else:
                    for place in sorted(timed):
                        column.ranks.append(s.ranks[place])
                        column.average.append(held[place] / s.steps[place])
        return regions


def _without(s: _Sums, ranks: set[int]) -> _Sums:
    keep = [i for i, r in enumerate(s.ranks) if r not in ranks]
    again = {old: new for new, old in enumerate(keep)}
    kept = _Sums(tuple(s.ranks[i] for i in keep), tuple(s.steps[i] for i in keep), tuple(s.wall[i] for i in keep))
    for name, held in s.totals.items():
        timed = s.timed[name]
        places = [i for i in keep if timed is None or i in timed]
        if places:
            kept.totals[name] = tuple(held[i] if i in places else 0.0 for i in keep)
            kept.timed[name] = None if len(places) == len(keep) else {again[i] for i in places}
    return kept


def _merged(parts: Sequence[_Sums], ranks: set[int]) -> list[_Sums]:
    """The ranks in ``ranks``, each its sums over every event it came in, as one-rank sums."""
    out: dict[int, _Sums] = {}
    for s in parts:
        for place, rank in enumerate(s.ranks):
            if rank not in ranks:
                continue
            one = out.setdefault(rank, _Sums((rank,), (0,), (0.0,)))
            one.steps = (one.steps[0] + s.steps[place],)
            one.wall = (one.wall[0] + s.wall[place],)
            for name, held in s.totals.items():
                timed = s.timed[name]
                if timed is None or place in timed:
                    one.totals[name] = (one.totals.get(name, (0.0,))[0] + held[place],)
                    one.timed[name] = None
    return [out[r] for r in sorted(out)]
