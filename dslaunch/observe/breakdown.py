"""The job-wide wall-clock breakdown (pure): every rank's timer regions over a period, per region the fastest,
the median and the slowest rank's time per step, and who the slowest is.

The launcher adds each rank's windows (``observe/record.py``) into a :class:`RankTotals` and, at each print,
:func:`summarize` turns them into one :class:`RegionStats` per region; :func:`format_table` is what the console
shows. Times are seconds per step, each rank's own average over the period, so ranks that reported a different
number of steps (one joined late, one's last window was not read) still compare. :data:`STEP` is each rank's
wall time per step, from the end of one ``timers.step()`` to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

STEP = "(step)"  # the step's own wall time: not a region name a user can give (the parentheses)


@dataclass
class RankTotals:
    """One rank over a period: its windows added up."""

    rank: int
    node_rank: int
    host: str
    steps: int = 0
    wall: float = 0.0
    totals: dict[str, float] = field(default_factory=dict)
    fastest: dict[str, float] = field(default_factory=dict)

    def add(self, steps: int, wall: float, regions: Iterable[tuple[str, float, float]]) -> None:
        self.steps += steps
        self.wall += wall
        for name, total, fastest in regions:
            self.totals[name] = self.totals.get(name, 0.0) + total
            best = self.fastest.get(name)
            self.fastest[name] = fastest if best is None else min(best, fastest)

    def per_step(self) -> dict[str, float]:
        """Seconds per step in each region, and :data:`STEP`; empty before a whole step."""
        if self.steps == 0:
            return {}
        return {STEP: self.wall / self.steps, **{k: v / self.steps for k, v in self.totals.items()}}


@dataclass(frozen=True)
class RegionStats:
    region: str
    ranks: int  # how many ranks timed it
    min: float
    median: float
    max: float
    slowest_rank: int
    slowest_node: int
    slowest_host: str


class Where(NamedTuple):
    """A rank's node and host. A tuple of an int and a string: the cyclic garbage collector stops tracking it, so a
    job of 100,000 ranks adds nothing to each of its passes (a dataclass would add two objects a rank)."""

    node_rank: int
    host: str


@dataclass
class Column:
    """One region over the ranks that timed it, a place per rank: seconds per step on average and in the fastest step
    (the launcher's figures, stragglers and breakdown read a window of thousands of ranks as columns: issue 54)."""

    ranks: list[int] = field(default_factory=list)
    average: list[float] = field(default_factory=list)
    fastest: list[float] = field(default_factory=list)


def summarize(ranks: Sequence[RankTotals]) -> tuple[RegionStats, ...]:
    """Per region (:data:`STEP` first, then by name): min / median / max of the ranks' seconds per step; the
    slowest rank is the lowest-numbered one at the max."""
    regions: dict[str, Column] = {}
    for r in ranks:
        for name, seconds in r.per_step().items():
            column = regions.setdefault(name, Column())
            column.ranks.append(r.rank)
            column.average.append(seconds)
    return summarize_columns(regions, {r.rank: Where(r.node_rank, r.host) for r in ranks})


def summarize_columns(regions: Mapping[str, Column], where: Mapping[int, Where]) -> tuple[RegionStats, ...]:
    """:func:`summarize` of columns: per region, the min, median and max in C over the column (a sort for the
    median), and the slowest rank found by position (by rank only where several share the max)."""
    stats = []
    for name in sorted(regions, key=lambda n: (n != STEP, n)):
        column = regions[name]
        values = column.average
        if not values:
            continue
        ordered = sorted(values)
        top = ordered[-1]
        at = values.index(top)
        slow = column.ranks[at]
        for _ in range(values.count(top) - 1):  # ranks tied at the max: the lowest-numbered (each found in C)
            at = values.index(top, at + 1)
            slow = min(slow, column.ranks[at])
        node = where[slow]
        middle = _middle(ordered)
        stats.append(RegionStats(name, len(values), ordered[0], middle, top, slow, node.node_rank, node.host))
    return tuple(stats)


def median(values: Iterable[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count); 0 for none."""
    return _middle(sorted(values))


def _middle(ordered: Sequence[float]) -> float:
    n = len(ordered)
    if n == 0:
        return 0.0
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def format_table(stats: Sequence[RegionStats], first_step: int, last_step: int, world: int) -> str:
    """The console's table: one line a region, milliseconds per step."""
    counted = max((s.ranks for s in stats), default=0)
    head = f"dslaunch: wall-clock breakdown, steps {first_step}-{last_step}, {counted} of {world} ranks (ms per step)"
    rows = [("region", "min", "median", "max", "slowest")]
    rows += [
        (s.region, _ms(s.min), _ms(s.median), _ms(s.max), f"rank {s.slowest_rank} ({s.slowest_host})") for s in stats
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = [
        "  " + "  ".join(cell.ljust(widths[i]) if i in (0, 4) else cell.rjust(widths[i]) for i, cell in enumerate(row))
        for row in rows
    ]
    return "\n".join([head, *(line.rstrip() for line in lines)])


def as_record(stats: Sequence[RegionStats], first_step: int, last_step: int) -> dict[str, object]:
    """The period as one JSON object (``--log-dir``'s ``breakdown.jsonl``), seconds per step."""
    return {
        "steps": [first_step, last_step],
        "regions": {
            s.region: {
                "ranks": s.ranks,
                "min": round(s.min, 6),
                "median": round(s.median, 6),
                "max": round(s.max, 6),
                "slowest": {"rank": s.slowest_rank, "node": s.slowest_node, "host": s.slowest_host},
            }
            for s in stats
        },
    }


def medians(per_rank: Mapping[int, Mapping[str, float]]) -> dict[str, float]:
    """Per region, the median over the ranks that timed it."""
    names = {name for times in per_rank.values() for name in times}
    return {name: median(t[name] for t in per_rank.values() if name in t) for name in names}
