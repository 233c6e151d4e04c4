"""Named wall-clock timers: ``with engine.timers("forward"): ...`` and a per-step breakdown.

Timing is always on (one ``perf_counter`` pair per block); the breakdown is reported
through the ``timers`` channel by :meth:`Timers.step` only when the wall-clock breakdown
is on (config ``wall_clock_breakdown``, ``DSLAUNCH_WALL_CLOCK_BREAKDOWN=1`` or
``timers=info``). On CUDA a block measures host time unless ``sync=True``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dslaunch import logs

_TRUE = {"1", "true", "yes", "on"}


def breakdown_on(env: Mapping[str, str] | None = None, config: Mapping[str, Any] | None = None) -> bool:
    env = os.environ if env is None else env
    if env.get("DSLAUNCH_WALL_CLOCK_BREAKDOWN", "").strip().lower() in _TRUE:
        return True
    if config is not None and bool(config.get("wall_clock_breakdown")):
        return True
    enabled = getattr(logs, "timers_enabled", None)
    return bool(enabled and enabled())


class Timers:
    def __init__(self, enabled: bool | None = None, sync: bool = False) -> None:
        self.enabled = breakdown_on() if enabled is None else enabled
        self.sync = sync
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
        """End a step: report the breakdown (if on), reset, and return it (seconds per timer)."""
        self._steps += 1
        data, self._totals = self._totals, {}
        if self.enabled and data:
            step = self._steps if step is None else step
            report = getattr(logs, "timers_report", None)
            if report is not None:
                report(step, data)
            else:
                parts = " | ".join(f"{n}: {s * 1e3:.2f} ms" for n, s in data.items())
                logs.get_logger("timers").info(f"step {step} wall clock breakdown: {parts}")
        return data
