"""Named wall-clock timers: ``with engine.timers("forward"): ...`` and a per-step breakdown.

Timing is always on (one ``perf_counter`` pair per block); the breakdown is reported
through the ``timers`` channel by :meth:`Timers.step` only when the wall-clock breakdown
is on (config ``wall_clock_breakdown``, ``DSLAUNCH_WALL_CLOCK_BREAKDOWN=1`` or
``timers=info``), and then every ``steps_per_print`` steps (config ``steps_per_print``, which
reaches ranks as ``DSLAUNCH_STEPS_PER_PRINT``; default: every step). On CUDA a block measures
host time unless ``sync=True``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dslaunch import logs
from dslaunch.bootstrap import progress
from dslaunch.logs import phases
from dslaunch.observe import rank_windows

_TRUE = {"1", "true", "yes", "on"}


def breakdown_on(env: Mapping[str, str] | None = None, config: Mapping[str, Any] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("DSLAUNCH_WALL_CLOCK_BREAKDOWN", "").strip().lower() in _TRUE:
        return True
    if config is not None and bool(config.get("wall_clock_breakdown")):
        return True
    return bool(logs.timers_enabled())


def steps_per_print_from_env(env: Mapping[str, str] | None = None) -> int:
    """``DSLAUNCH_STEPS_PER_PRINT`` (the launcher checked the config's value); 1 when unset or not a positive int."""
    env = os.environ if env is None else env
    try:
        every = int(env.get("DSLAUNCH_STEPS_PER_PRINT", "").strip() or 1)
    except ValueError:
        return 1
    return max(every, 1)


def reports_at(step: int, every: int) -> bool:
    """Whether step ``step`` is reported when the breakdown is reported every ``every`` steps."""
    return every <= 1 or step % every == 0


class Timers:
    def __init__(self, enabled: bool | None = None, sync: bool = False, steps_per_print: int | None = None) -> None:
        self.enabled = breakdown_on() if enabled is None else enabled
        self.sync = sync
        self.steps_per_print = steps_per_print_from_env() if steps_per_print is None else steps_per_print
        self._totals: dict[str, float] = {}
        self._steps = 0

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        self._synchronize()
        start = time.perf_counter()
        try:
            yield
        finally:
            self._synchronize()
            self._totals[name] = self._totals.get(name, 0.0) + time.perf_counter() - start

    def _synchronize(self) -> None:
        if self.sync:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
                torch.cuda.synchronize()

    def elapsed(self, name: str) -> float:
        """Seconds spent in ``name`` since the last step()."""
        return self._totals.get(name, 0.0)

    def breakdown(self) -> dict[str, float]:
        return dict(self._totals)

    def step(self, step: int | None = None) -> dict[str, float]:
        """End a step: report the breakdown (if on, every ``steps_per_print`` steps), reset, and return it.

        The breakdown is in seconds per timer, for this step alone; a reported step shows its own.
        ``step`` defaults to the number of step() calls so far.
        """
        phases.mark("first_step")
        self._steps += 1
        progress.beat()  # a step is progress for --hang-timeout
        data, self._totals = self._totals, {}
        step = self._steps if step is None else step
        rank_windows.add(step, data)  # the job-wide breakdown's window (docs/observability.md)
        if self.enabled and data and reports_at(step, self.steps_per_print):
            logs.timers_report(step, data)
        return data
