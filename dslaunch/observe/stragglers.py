"""Stragglers named (pure): a rank whose time in a region stays above the job's median by a factor.

Fed one window of every rank at a time (``observe/session.py``): per rank and region, its seconds per step on
average and in its fastest step. A rank is slow in a window when even its fastest step there took longer than
``factor`` times the median rank's average (and at least :data:`FLOOR` seconds more: a 0.1 ms region's noise is
no straggler); slow for ``windows`` windows in a row, it is named once. It has recovered once its average is
back under ``factor`` times the median for as many windows in a row, and is named once more. A node whose ranks
(two or more) are all slow in a region is named as the node instead of rank by rank. A window is judged only when
at least :data:`MIN_RANKS` ranks and half the job's sent it.

:data:`STEP` (each rank's step wall time) is left out: in synchronous training every rank waits for the slowest,
so all step times match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dslaunch.observe.breakdown import STEP, Column, Where, median

__all__ = ["FLOOR", "MIN_RANKS", "StragglerWatch", "Where"]  # Where: its old home, kept for its importers

FLOOR = 0.001
MIN_RANKS = 3  # a median of two ranks is halfway between a straggler and the rest


@dataclass
class _Track:
    slow_for: int = 0  # windows in a row it was slow
    fine_for: int = 0  # windows in a row it was fine, while flagged
    flagged: bool = False
    named: bool = False  # its own line was printed (not folded into its node's)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


@dataclass
class StragglerWatch:
    factor: float
    windows: int  # how many windows in a row make a straggler (and a recovery)
    steps: int  # what they come to in steps, for the message
    where: Mapping[int, Where]  # rank -> its node and host
    tracks: dict[tuple[int, str], _Track] = field(default_factory=dict)  # only ranks slow now, or named
    nodes_flagged: set[tuple[int, str]] = field(default_factory=set)
    node_ranks: dict[int, list[int]] = field(default_factory=dict)  # node rank -> its ranks, from ``where``

    def __post_init__(self) -> None:
        for rank, w in self.where.items():
            self.node_ranks.setdefault(w.node_rank, []).append(rank)

    def feed(self, window: Mapping[int, Mapping[str, tuple[float, float]]]) -> list[str]:
        """One window: rank -> region -> (average, fastest) seconds per step. The lines to print. A window that
        fewer than :data:`MIN_RANKS` or half the job's ranks sent (the job is ending) is no measure: skipped."""
        regions: dict[str, Column] = {}
        for rank, times in sorted(window.items()):
            for region, (average, fastest) in times.items():
                column = regions.setdefault(region, Column())
                column.ranks.append(rank)
                column.average.append(average)
                column.fastest.append(fastest)
        return self.feed_columns(regions, len(window))

    def feed_columns(
        self, regions: Mapping[str, Column], count: int, medians: Mapping[str, float] | None = None
    ) -> list[str]:
        """:meth:`feed` of one window as columns (``count``: the ranks that sent it). Only the ranks slow in it
        (their fastest step over the limit: found in C with ``max`` where none is) and those already tracked are
        looked at one by one: a window of 100,000 ranks with no straggler costs a ``max`` and a median a region
        (``medians``: each region's, where the caller has them: the breakdown's figures of the same window)."""
        if count < MIN_RANKS or 2 * count < len(self.where):
            return []
        median_of = {
            name: median(c.average) if medians is None else medians[name]
            for name, c in regions.items()
            if name != STEP and c.average
        }
        tracked: dict[str, set[int]] = {}
        for rank, region in self.tracks:
            tracked.setdefault(region, set()).add(rank)
        changed: list[tuple[int, str, bool]] = []  # (rank, region, now flagged): by rank, then region name
        looked: list[tuple[int, str]] = []
        for region, column in regions.items():
            if region not in median_of:
                continue
            limit = max(self.factor * median_of[region], median_of[region] + FLOOR)
            fastest = column.fastest
            places = [i for i, t in enumerate(fastest) if t > limit] if max(fastest) > limit else []
            if region in tracked:
                place_of = {rank: i for i, rank in enumerate(column.ranks)}
                places = sorted({*places, *(place_of[r] for r in tracked[region] if r in place_of)})
            for i in places:
                rank = column.ranks[i]
                track = self.tracks.setdefault((rank, region), _Track())
                looked.append((rank, region))
                if self._update(track, slow=fastest[i] > limit, fine=column.average[i] <= limit):
                    changed.append((rank, region, track.flagged))
        changed.sort(key=lambda c: c[:2])
        lines = self._lines(changed, regions, median_of)
        for key in looked:  # a track back where a fresh one starts is forgotten: the others stay few
            if self.tracks.get(key) == _Track():
                del self.tracks[key]
        return lines

    def _update(self, track: _Track, *, slow: bool, fine: bool) -> bool:
        """Whether the rank's state flipped."""
        track.slow_for = track.slow_for + 1 if slow else 0
        track.fine_for = track.fine_for + 1 if fine and track.flagged else 0
        if not track.flagged and track.slow_for >= self.windows:
            track.flagged = True
            return True
        if track.flagged and track.fine_for >= self.windows:
            track.flagged, track.fine_for = False, 0
            return True
        return False

    def _node_ranks(self, node_rank: int) -> list[int]:
        return self.node_ranks.get(node_rank, [])

    def _lines(
        self,
        changed: Sequence[tuple[int, str, bool]],
        regions: Mapping[str, Column],
        median: Mapping[str, float],
    ) -> list[str]:
        lines: list[str] = []
        if not changed:
            return lines
        places: dict[str, dict[int, int]] = {}

        def average(rank: int, region: str) -> float | None:
            if region not in places:
                places[region] = {r: i for i, r in enumerate(regions[region].ranks)}
            at = places[region].get(rank)
            return None if at is None else regions[region].average[at]

        for node_rank, region in sorted({(self.where[r].node_rank, reg) for r, reg, _ in changed if r in self.where}):
            ranks = self._node_ranks(node_rank)
            all_slow = len(ranks) > 1 and all(self.tracks.get((r, region), _Track()).flagged for r in ranks)
            key = (node_rank, region)
            if all_slow and key not in self.nodes_flagged:
                self.nodes_flagged.add(key)
                times = [t for t in (average(r, region) for r in ranks) if t is not None]
                lines.append(
                    f"straggler node: node {node_rank} ({self.where[ranks[0]].host}): all its {len(ranks)} "
                    f"ranks spend {_ms(min(times))}-{_ms(max(times))} per step in '{region}', the job's median "
                    f"{_ms(median[region])} (over {self.factor:g}x for {self.steps} steps)"
                )
            elif not all_slow and key in self.nodes_flagged:
                self.nodes_flagged.discard(key)
                lines.append(f"straggler node recovered: node {node_rank} in '{region}'")
        for rank, region, flagged in changed:
            track = self.tracks[(rank, region)]
            where = self.where.get(rank, Where(-1, "?"))
            if (where.node_rank, region) in self.nodes_flagged:
                continue  # its node's line says it
            seconds = average(rank, region) or 0.0
            name = f"rank {rank} (node {where.node_rank}, host {where.host})"
            if flagged and not track.named:
                track.named = True
                lines.append(
                    f"straggler: {name} spends {_ms(seconds)} per step in '{region}', the job's median "
                    f"{_ms(median[region])} (over {self.factor:g}x for {self.steps} steps)"
                )
            elif not flagged and track.named:
                track.named = False
                lines.append(
                    f"straggler recovered: {name} spends {_ms(seconds)} per step in '{region}', "
                    f"the job's median {_ms(median[region])}"
                )
        return lines
