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
    stepping: float = 0.0  # seconds of wall time spent in steps (the median rank's windows)
    first_step_at: float = 0.0
    regions: tuple[RegionStats, ...] = ()  # the last complete window's
    stragglers: int = 0  # ranks named slow now

    def goodput(self, now: float) -> float:
        wall = now - self.started
        return min(1.0, self.stepping / wall) if wall > 0 else 0.0
