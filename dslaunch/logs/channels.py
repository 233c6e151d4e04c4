"""Hooks for the comm layer and the timers: per-collective records, comm summary, wall-clock breakdown.

The comm layer calls :func:`comm_record` after every collective (``comm_enabled()``
tells it whether timing is worth doing at all); the timers call :func:`timers_report`.
"""

from __future__ import annotations

import threading
from typing import Any

from dslaunch.logs import _core
from dslaunch.logs import spec as S

_lock = threading.Lock()
_summary: dict[str, list[float]] = {}  # op -> [count, bytes, seconds]


def comm_enabled() -> bool:
    """True if a collective record or the exit summary would be kept (skip timing otherwise)."""
    return _core.get_logger("comm")._level <= S.DEBUG or _core.get_logger("comm.summary")._level <= S.INFO


def comm_record(
    *,
    op: str,
    axis: str | None = None,
    group_size: int,
    dtype: str,
    nbytes: int,
    duration_s: float,
    dim: str | None = None,
    **extra: Any,
) -> None:
    """One collective: a debug record under ``comm`` and a line in the exit summary (``comm.summary``).

    ``axis`` is the mesh axis (dim or view) of the group; ``dim=`` is its deprecated alias (warned
    once per process). The record keeps its field name ``dim`` so log readers need not change.
    """
    if dim is not None:
        from dslaunch.mesh import axis_alias

        axis = axis_alias(axis, dim, api="comm_record", call="dslaunch.logs.comm_record")
    log = _core.get_logger("comm")
    if log._level <= S.DEBUG:
        log.debug(
            "collective",
            op=op,
            dim=axis,
            group_size=group_size,
            dtype=dtype,
            bytes=nbytes,
            ms=round(duration_s * 1e3, 3),
            **extra,
        )
    if _core.get_logger("comm.summary")._level <= S.INFO:
        with _lock:
            row = _summary.setdefault(op, [0, 0, 0.0])
            row[0] += 1
            row[1] += nbytes
            row[2] += duration_s


def flush_comm_summary() -> None:
    """Print one ``comm.summary`` record per op (count, bytes, total time) and reset; runs at exit."""
    with _lock:
        rows = sorted(_summary.items())
        _summary.clear()
    log = _core.get_logger("comm.summary")
    for op, (count, nbytes, seconds) in rows:
        log.info(
            "comm summary",
            op=op,
            count=int(count),
            bytes=int(nbytes),
            total_ms=round(seconds * 1e3, 3),
            mean_ms=round(seconds * 1e3 / count, 3) if count else 0.0,
        )


_core.at_shutdown(flush_comm_summary)  # printed at exit, before the file sink's last flush


def timers_report(step: int | None, breakdown: dict[str, float], **extra: Any) -> None:
    """The wall-clock breakdown (seconds per timer) as one ``timers`` record, in ms.

    Prints at the default level when wall_clock_breakdown is on; ``timers=off`` silences it.
    """
    log = _core.get_logger("timers")
    if log._level > S.INFO:
        return
    fields = {f"{name}_ms": round(seconds * 1e3, 3) for name, seconds in breakdown.items()}
    log.info("wall clock breakdown", step=step, **fields, **extra)


def timers_enabled() -> bool:
    """True when a timers_report would print (wall_clock_breakdown on, or timers=info/debug)."""
    return _core.get_logger("timers")._level <= S.INFO
