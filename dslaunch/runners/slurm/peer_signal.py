"""How the tasks of one srun step hear that another node failed: SIGURG, recorded from the task's first line.

A failing node runs ``scancel --signal=URG`` on its step (:mod:`~dslaunch.runners.slurm.in_step`). SIGURG is
ignored by default, so a task that had not yet set its handler lost it and ran its whole attempt while the
others restarted (1 run in 12 under load: the signal came 6 ms too early). Each task listens before it
parses its command line, keeps the time it last heard one, and asks the attempt it runs to stop.

A task that has not started at all cannot hear it either: srun starts the tasks of a step one node after
another, and a rank can fail first. In its first ``START_SKEW`` seconds a failing task tells its peers again
every second (in_step.py), so a task started up to that much later than it still hears.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Mapping
from types import FrameType

PEER_FAILED = signal.SIGURG
START_SKEW = 10.0  # seconds: the tasks of one step start within this of each other (docs/slurm.md)


class _Ear:
    heard_at = -math.inf  # monotonic time of the last PEER_FAILED
    since = math.inf  # monotonic time this task began to listen
    on_heard: Callable[[], None] | None = None


_ear = _Ear()


def listen_in_step(env: Mapping[str, str] = os.environ) -> None:
    """Inside an srun step, record every PEER_FAILED from now on (the handler stays: SIGURG does nothing else)."""
    if (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")) and signal.getsignal(PEER_FAILED) is not _heard:
        signal.signal(PEER_FAILED, _heard)
        _ear.since = min(_ear.since, time.monotonic())


def _heard(_signum: int, _frame: FrameType | None) -> None:
    _ear.heard_at = time.monotonic()
    if _ear.on_heard is not None:
        _ear.on_heard()


def heard_at() -> float:
    return _ear.heard_at


def on_heard(callback: Callable[[], None] | None) -> None:
    """Run ``callback`` (in the signal handler) at each PEER_FAILED from now on; None: only record."""
    _ear.on_heard = callback


def start_window_left() -> float:
    """Seconds left of this task's first ``START_SKEW``: a peer's task may not have started yet."""
    return _ear.since + START_SKEW - time.monotonic()
