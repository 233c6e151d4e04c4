"""Per-phase summary of a timeline: when the ranks reached each phase (median, slowest rank and its host) and how
long the phase took them; and its text table."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from dslaunch.logs.phases import PHASES
from dslaunch.report.timeline import Timeline

# What each phase's bar segment (from the rank's previous phase to this one) stands for.
SEGMENT = {
    "spawned": "spawned",
    "bootstrap": "interpreter start",
    "torch_imported": "import torch",
    "pg_ready": "process group",
    "mesh_ready": "device mesh",
    "first_step": "to first step",
    "exit": "run and exit",
}


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    ranks: int  # how many ranks reached it
    at_median: float  # seconds since the attempt's first spawn
    at_max: float
    slowest_rank: int  # the rank that reached it last (the lowest such rank on a tie)
    slowest_host: str
    took_median: float | None  # seconds since the rank's previous phase; None for the first phase
    took_max: float | None


def rows(timeline: Timeline) -> list[PhaseRow]:
    out = []
    for phase in PHASES:
        reached = [r for r in timeline.ranks if phase in r.times]
        if not reached:
            continue
        at = [r.times[phase] - timeline.start for r in reached]
        slowest = max(range(len(reached)), key=lambda i: (at[i], -reached[i].rank))
        took = [d for d in (_took(r.times, phase) for r in reached) if d is not None]
        out.append(
            PhaseRow(
                phase=phase,
                ranks=len(reached),
                at_median=statistics.median(at),
                at_max=at[slowest],
                slowest_rank=reached[slowest].rank,
                slowest_host=reached[slowest].host,
                took_median=statistics.median(took) if took else None,
                took_max=max(took) if took else None,
            )
        )
    return out


def _took(times: Mapping[str, float], phase: str) -> float | None:
    before = [p for p in PHASES[: PHASES.index(phase)] if p in times]
    return times[phase] - times[before[-1]] if before else None


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def headline(timeline: Timeline) -> str:
    n, hosts = len(timeline.ranks), len(timeline.hosts)
    attempts = f"attempt {timeline.attempt} ({timeline.attempts} attempt{'s' if timeline.attempts != 1 else ''})"
    runs = f"; {timeline.runs} runs in this log dir, the latest shown" if timeline.runs > 1 else ""
    return (
        f"launch timeline of run {timeline.run_id or '?'}, {attempts}: {n} rank{'s' if n != 1 else ''} "
        f"on {hosts} host{'s' if hosts != 1 else ''}, {timeline.end - timeline.start:.3f}s from first spawn "
        f"to last event{runs}"
    )


def exit_line(timeline: Timeline) -> str:
    exited = [r for r in timeline.ranks if r.code is not None]
    failed = [r for r in exited if r.code]
    missing = len(timeline.ranks) - len(exited)
    parts = [f"rank {r.rank} ({r.host}) exited {r.code}" for r in failed[:8]]
    if len(failed) > 8:
        parts.append(f"{len(failed) - 8} more failed")
    if not failed:
        parts.append(f"{len(exited)} exited 0")
    if missing:
        parts.append(f"{missing} with no exit recorded")
    return "exit: " + ", ".join(parts)


def render(timeline: Timeline) -> str:
    """The text table: one row per phase, times since the attempt's first spawn."""
    header = ("phase", "ranks", "median", "slowest", "rank", "host", "took median", "took max")
    body = [
        (
            row.phase,
            f"{row.ranks}/{len(timeline.ranks)}",
            _s(row.at_median),
            _s(row.at_max),
            str(row.slowest_rank),
            row.slowest_host,
            _s(row.took_median),
            _s(row.took_max),
        )
        for row in rows(timeline)
    ]
    widths = [max(len(cells[i]) for cells in (header, *body)) for i in range(len(header))]
    left = {0, 5}  # phase and host read left-aligned, numbers right-aligned

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        ).rstrip()

    return "\n".join(
        [
            headline(timeline),
            "times since the first spawn; 'took': since the rank's previous phase",
            line(header),
            *map(line, body),
            exit_line(timeline),
        ]
    )
