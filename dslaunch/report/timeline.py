"""Read the ``phase`` records of a log dir back into one timeline: the latest run's latest attempt, per rank."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dslaunch.errors import DslaunchError
from dslaunch.inputs import userfiles
from dslaunch.logs.phases import EVENT, PHASES

_KNOWN = frozenset(PHASES)


class ReportError(DslaunchError):
    """A log dir with no timeline in it (missing, not a directory, no phase records)."""


@dataclass(frozen=True)
class PhaseEvent:
    """One ``phase`` record: ``t`` is wall-clock seconds (``time.time()``)."""

    phase: str
    t: float
    rank: int
    host: str
    attempt: int = 0
    run_id: str = ""
    code: int | None = None


@dataclass(frozen=True)
class RankTimes:
    rank: int
    host: str
    times: Mapping[str, float]  # phase -> t, in PHASES order
    code: int | None  # exit code, when the agent saw the exit


@dataclass(frozen=True)
class Timeline:
    run_id: str
    attempt: int  # the attempt shown (the latest)
    attempts: int  # how many attempts the run had in the log dir
    runs: int  # how many runs wrote into the log dir
    ranks: tuple[RankTimes, ...]  # by rank
    start: float  # the earliest time of the attempt (its first spawn)
    end: float  # the latest time of the attempt

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.host for r in self.ranks))


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def parse_line(line: str) -> PhaseEvent | None:
    """The phase record on ``line``, or None for anything else (other records, garbage, half-written lines)."""
    if '"phase"' not in line:
        return None
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("event") != EVENT:
        return None
    phase, t, rank = data.get("phase"), data.get("t"), _int(data.get("rank"))
    if not isinstance(phase, str) or phase not in _KNOWN or rank is None:
        return None
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return None
    host, run_id, code = data.get("host"), data.get("run_id"), data.get("code")
    return PhaseEvent(
        phase=phase,
        t=float(t),
        rank=rank,
        host=host if isinstance(host, str) and host else "?",
        attempt=_int(data.get("attempt")) or 0,
        run_id=run_id if isinstance(run_id, str) else "",
        code=code if isinstance(code, int) and not isinstance(code, bool) else None,
    )


def parse_lines(lines: Iterable[str]) -> list[PhaseEvent]:
    return [event for event in map(parse_line, lines) if event is not None]


def read_dir(log_dir: str) -> list[PhaseEvent]:
    """Every phase record in the ``*.jsonl`` files of ``log_dir``; a ``ReportError`` if it is not a directory."""
    if not os.path.exists(log_dir):
        raise ReportError(f"{log_dir}: no such directory", option="--report")
    if not os.path.isdir(log_dir):
        raise ReportError(f"{log_dir}: not a directory", option="--report")
    try:
        names = sorted(n for n in os.listdir(log_dir) if n.endswith(".jsonl"))
    except OSError as exc:
        raise ReportError(f"{log_dir}: {exc.strerror or exc}", option="--report") from None
    events: list[PhaseEvent] = []
    for name in names:  # one unreadable, not regular (a FIFO, /dev/zero) or over-long line: skipped
        events.extend(parse_lines(userfiles.regular_lines(os.path.join(log_dir, name))))
    return events


def build(events: Iterable[PhaseEvent]) -> Timeline | None:
    """The latest run's latest attempt (runs appended to one log dir are told apart by run id); None if empty."""
    events = list(events)
    if not events:
        return None
    last_seen: dict[str, float] = {}
    for e in events:
        last_seen[e.run_id] = max(e.t, last_seen.get(e.run_id, e.t))
    run_id = max(last_seen, key=lambda r: last_seen[r])
    mine = [e for e in events if e.run_id == run_id]
    attempt = max(e.attempt for e in mine)
    attempts = len({e.attempt for e in mine})
    shown = sorted((e for e in mine if e.attempt == attempt), key=lambda e: e.t)
    by_rank: dict[int, dict[str, float]] = {}
    hosts: dict[int, str] = {}
    codes: dict[int, int | None] = {}
    for e in shown:
        times = by_rank.setdefault(e.rank, {})
        if e.phase not in times or e.phase == "exit":  # first time reached; the last exit
            times[e.phase] = e.t
        if e.phase == "exit":
            codes[e.rank] = e.code
        if e.host != "?" or e.rank not in hosts:
            hosts[e.rank] = e.host
    ranks = tuple(
        RankTimes(
            rank=rank,
            host=hosts[rank],
            times={p: by_rank[rank][p] for p in PHASES if p in by_rank[rank]},
            code=codes.get(rank),
        )
        for rank in sorted(by_rank)
    )
    return Timeline(
        run_id=run_id,
        attempt=attempt,
        attempts=attempts,
        runs=len(last_seen),
        ranks=ranks,
        start=shown[0].t,
        end=shown[-1].t,
    )


def load(log_dir: str) -> Timeline:
    """The timeline of ``log_dir``; a ``ReportError`` naming what is wrong when there is none."""
    timeline = build(read_dir(log_dir))
    if timeline is None:
        raise ReportError(
            f"{log_dir}: no launch timeline in it (no 'phase' records in its *.jsonl files; "
            "was the job started with --log-dir by this dslaunch?)",
            option="--report",
        )
    return timeline
