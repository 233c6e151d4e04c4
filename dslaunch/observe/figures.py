"""What the metrics show of a running job: the observer keeps it (``observe/session.py``), ``observe/metrics.py``
reads it at each scrape (from the HTTP server's thread: each field is replaced whole, never changed in place but
``restarts``, which is copied before it is read)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from dslaunch.observe.breakdown import RegionStats


@dataclass
class JobFigures:
    """What the metrics show (``observe/metrics.py`` reads it at each scrape)."""

    started: float = field(default_factory=time.time)
    state: str = "starting"  # starting | running | restarting | succeeded | failed
    attempt: int = 0
    restarts: dict[str, int] = field(default_factory=dict)  # cause -> count
    ranks: int = 0
    nodes: int = 0
    ranks_alive: int = 0
    nodes_done: int = 0
    nodes_lost: int = 0
    step: int = 0
    step_rate: float = 0.0
    stepping: float = 0.0  # seconds of wall time spent in steps (the median rank's windows), every attempt's
    first_step_at: float = 0.0
    regions: tuple[RegionStats, ...] = ()  # the last complete window's
    stragglers: int = 0  # ranks named slow now
    # the wall time that was not steps, by where it went (wall_split); Unix times
    startup: float = 0.0  # each finished attempt's start to its first step (all of it, for one that never stepped)
    restarting: float = 0.0  # an attempt's end to the next one's start
    lost: float = 0.0  # time in steps of attempts that failed and were restarted (docs/observability.md: a bound)
    attempt_started: float = 0.0  # 0: the first attempt, which starts with the launcher
    attempt_first_step: float = 0.0
    attempt_stepping: float = 0.0
    ended_at: float = 0.0  # the last attempt's end, while no other runs

    def goodput(self, now: float) -> float:
        """Time in steps that were kept (a restarted attempt's are lost work) over the job's wall time."""
        wall = now - self.started
        return min(1.0, max(0.0, self.stepping - self.lost) / wall) if wall > 0 else 0.0

    def wall_split(self, now: float) -> dict[str, float]:
        """The job's wall time so far: in steps kept, start-up, restarts, lost work, and the rest (between windows,
        the end's teardown), in seconds; they add up to the wall time."""
        wall = max(0.0, now - self.started)
        start = self.attempt_started or self.started
        startup = self.startup
        if not self.attempt_first_step and not self.ended_at:  # this attempt has not stepped yet
            startup += max(0.0, now - start)
        restarts = self.restarting + (max(0.0, now - self.ended_at) if self.state == "restarting" else 0.0)
        parts = {
            "steps": max(0.0, self.stepping - self.lost),
            "startup": startup,
            "restarts": restarts,
            "lost_work": self.lost,
        }
        parts["other"] = max(0.0, wall - sum(parts.values()))
        return parts

    # ---- an attempt's course (observe/session.py) ---------------------------------------------------------------
    def attempt_began(self, now: float, first: bool) -> None:
        if self.ended_at:
            self.restarting += max(0.0, now - self.ended_at)
        self.ended_at, self.attempt_first_step, self.attempt_stepping = 0.0, 0.0, 0.0
        self.attempt_started = 0.0 if first else now

    def first_step(self, at: float) -> None:
        if not self.attempt_first_step:
            self.attempt_first_step = at
            self.startup += max(0.0, at - (self.attempt_started or self.started))
        if not self.first_step_at:
            self.first_step_at = at

    def stepped(self, seconds: float) -> None:
        self.stepping += seconds
        self.attempt_stepping += seconds

    def attempt_over(self, now: float, restarting: bool) -> None:
        if not self.attempt_first_step:
            self.startup += max(0.0, now - (self.attempt_started or self.started))
            self.attempt_first_step = now  # counted: a later call of wall_split adds nothing
        if restarting:
            self.lost += self.attempt_stepping
        self.ended_at = now
