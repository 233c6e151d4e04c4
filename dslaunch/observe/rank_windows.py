"""The rank's side of the job-wide breakdown: sum each step's timer regions over a window, one record per window.

``engine.timers.step()`` hands each step's breakdown to :func:`add`; every ``DSLAUNCH_WINDOW_STEPS`` steps the sums
go into the rank's window file (``observe/record.py``): one ``pwrite`` a window, nothing else per step but a few
additions. Outside dslaunch (no ``DSLAUNCH_WINDOW_FILE``) it does nothing. Stdlib only, never raises.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from dslaunch.observe import record


class _Windows:
    def __init__(self, fd: int, steps: int) -> None:
        self.fd = fd
        self.size = steps
        self.totals: dict[str, float] = {}
        self.fastest: dict[str, float] = {}
        self.steps = 0
        self.step = 0
        self.index = 0
        self.started: float | None = None  # perf_counter at the end of the previous window (or the first step)
        self.first_at = 0.0

    def add(self, step: int, data: Mapping[str, float]) -> None:
        """Windows follow the step numbers (steps 1-5, 6-10, ... for 5), so every rank's window N holds the same
        steps: it is sent after its last step, or, when the numbers skip past its end, before the next one's."""
        now = time.perf_counter()
        if self.started is None:  # the first step: its own time has no start to measure from
            self.started, self.first_at = now, time.time()
            return
        index = (step - 1) // self.size + 1
        if self.steps and index != self.index:
            self._send(now)
        self.index = index
        for name, seconds in data.items():
            self.totals[name] = self.totals.get(name, 0.0) + seconds
            best = self.fastest.get(name)
            self.fastest[name] = seconds if best is None or seconds < best else best
        self.steps += 1
        self.step = step
        if step % self.size == 0:
            self._send(now)

    def _send(self, now: float) -> None:
        started = self.started if self.started is not None else now
        regions = tuple(
            record.Region(name[: record.MAX_NAME], total, self.fastest[name])
            for name, total in list(self.totals.items())[: record.MAX_REGIONS]
        )
        window = record.Window(0, self.index, self.step, self.steps, now - started, regions, self.first_at)
        record.write_slot(self.fd, self.index, record.encode(window))
        self.totals, self.fastest, self.steps, self.started, self.first_at = {}, {}, 0, now, 0.0


_state: _Windows | None = None
_opened = False


def _open() -> _Windows | None:
    global _state, _opened
    _opened = True
    path = os.environ.get(record.ENV_FILE)
    if not path:
        return None
    try:
        steps = max(1, int(os.environ.get(record.ENV_STEPS, "5")))
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    _state = _Windows(fd, steps)
    return _state


def add(step: int, data: Mapping[str, float]) -> None:
    """Step ``step`` ended with ``data`` (seconds per region, this step alone)."""
    windows = _state if _opened else _open()
    if windows is not None:
        try:
            windows.add(step, data)
        except Exception:  # noqa: BLE001 - a measurement must never take the rank down
            pass
