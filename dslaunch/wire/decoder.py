"""Marked lines back into events: every field's type and range checked (``wire_check``), or ``Malformed`` (why)."""

from __future__ import annotations

from dslaunch.limits import MAX_WORLD_SIZE
from dslaunch.wire.events import (
    _KINDS,
    MARKER,
    Done,
    Event,
    Idle,
    NodeLost,
    RankExit,
    Spawned,
    Stacks,
    StopAsked,
    StopStep,
    TimerWindow,
)
from dslaunch.wire_check import INT_MAX, Bool, Int, ListOf, Malformed, Maybe, Real, Row, Spec, Text, fields, load_object


def decode(line: str) -> Event | None:
    """The event on a marked line; None for ordinary output or anything malformed (``decode_checked`` says why)."""
    event = decode_checked(line)
    return event if not isinstance(event, Malformed) else None


def decode_checked(line: str) -> Event | Malformed | None:
    """The event on a marked line, every field's type and range checked (``wire_check``); ``Malformed`` (why) for a
    marked line that is no event; None for ordinary output."""
    if not line.startswith(MARKER):
        return None
    try:
        raw = load_object(line[len(MARKER) :])
        kind = raw.pop("ev", None)
        cls = _KINDS.get(kind) if type(kind) is str else None
        if cls is None:
            return Malformed(f"no event kind {str(kind)[:40]!r}")
        required, optional = _SCHEMAS[cls]
        return cls(**fields(raw, required, optional))
    except Malformed as exc:
        return exc


# What each event's fields may hold. A node agent cuts what it sends (a rank's error at TRACEBACK_CHARS, its stderr
# tail); these bounds are wider, so no event an agent makes is refused.
_RANK = Int(0, MAX_WORLD_SIZE)
_NODE = Int(0, MAX_WORLD_SIZE)
_HOST = Text(1024)
_CODE = Int(0, 255)
_TIME = Real(-1e12, 1e12)
_COUNT = Int(0, INT_MAX)
_SECONDS = Real(0, 1e12)
_SCHEMAS: dict[type, tuple[dict[str, Spec], dict[str, Spec]]] = {
    Spawned: ({"rank": _RANK, "local_rank": _RANK, "pid": Int(0, INT_MAX), "host": _HOST}, {}),
    RankExit: (
        {
            **{"rank": _RANK, "local_rank": _RANK, "node_rank": _NODE, "host": _HOST, "pid": Int(0, INT_MAX)},
            **{"code": _CODE, "signal": Maybe(Text(64)), "ts": _TIME, "by_agent": Bool()},
        },
        {"error": Maybe(Text(1 << 20)), "stderr_tail": ListOf(Text(1 << 16), 4096), "beats": Int(0, INT_MAX)},
    ),
    Done: ({"node_rank": _NODE, "code": _CODE}, {"stopped_by": Maybe(Int(1, 64)), "stop_requested_at": Maybe(_TIME)}),
    StopAsked: ({"node_rank": _NODE, "signum": Int(1, 64), "ts": _TIME}, {}),
    Idle: ({"node_rank": _NODE, "idle": Bool()}, {"live": Int(0, MAX_WORLD_SIZE)}),
    Stacks: (
        {"node_rank": _NODE, "host": _HOST, "ranks": ListOf(Row((_RANK, Text(64), Int(0, INT_MAX), _TIME)), 1 << 16)},
        {"traces": ListOf(Text(4096), 1 << 16)},
    ),
    NodeLost: ({"node_rank": _NODE, "host": _HOST}, {"status": Maybe(Int(-127, 255)), "why": Text(4096)}),
    TimerWindow: (
        {
            **{"node_rank": _COUNT, "rank": _COUNT, "index": _COUNT, "step": _COUNT},
            **{"steps": Int(1, INT_MAX), "wall": _SECONDS, "regions": ListOf(Row((Text(64), _SECONDS, _SECONDS)), 64)},
        },
        {"first_step_at": _SECONDS},
    ),
    StopStep: ({"node_rank": _NODE, "step": Maybe(Int(1, 1 << 62))}, {}),
}
