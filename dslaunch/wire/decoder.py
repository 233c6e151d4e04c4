"""Marked lines back into events: every field's type and range checked, or ``Malformed`` (why).

One decoder for every event, cheap at scale (issue 54): the line is parsed by orjson (imported on the first
decode: the launcher has it loaded for its logs, and a node agent, which never decodes events, never imports it),
then checked by its kind's ``wire_check.compiled`` checker, generated from the specs below on the kind's first use:
straight-line code, no loop over the fields; where it refuses, ``wire_check.fields`` says why. The event is then
made without its dataclass ``__init__`` (every field is already checked; the events have no ``__post_init__``).
Figures: docs/benchmarks.md, "Decoding a message".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from dslaunch.limits import MAX_SLOTS_PER_HOST, MAX_WORLD_SIZE
from dslaunch.wire.events import (
    _KINDS,
    MARKER,
    Done,
    Event,
    Idle,
    NodeLost,
    NodeWindows,
    RankExit,
    Spawned,
    Stacks,
    StopAsked,
    StopStep,
    TimerWindow,
)
from dslaunch.wire_check import (
    INT_MAX,
    Bool,
    Int,
    ListOf,
    Malformed,
    Maybe,
    Real,
    Row,
    Spec,
    Text,
    compiled,
)


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
        raw = _load(line[len(MARKER) :])
    except ValueError as exc:  # orjson.JSONDecodeError: bad JSON, bad UTF-8, nesting past its depth limit
        return Malformed(f"not JSON ({type(exc).__name__})")
    if type(raw) is not dict:
        return Malformed("not a JSON object")
    kind = raw.pop("ev", None)
    made = (_MAKERS.get(kind) or _maker(kind)) if type(kind) is str else None
    if made is None:
        return Malformed(f"no event kind {str(kind)[:40]!r}")
    try:
        return made(raw)
    except Malformed as exc:
        return exc


def _first_load(text: str) -> Any:
    global _load
    import orjson

    _load = orjson.loads
    return _load(text)


_load: Callable[[str], Any] = _first_load
_MAKERS: dict[str, Callable[[dict[str, Any]], Event]] = {}  # kind -> its checked maker, compiled on first use


def _maker(kind: str) -> Callable[[dict[str, Any]], Event] | None:
    cls = _KINDS.get(kind)
    if cls is None:
        return None
    required, optional = _SCHEMAS[cls]
    check = compiled(required, optional, _defaults(cls)).check
    agree = _AGREE.get(cls)
    new, setattr_ = object.__new__, object.__setattr__

    def make(raw: dict[str, Any]) -> Event:
        event = new(cls)
        setattr_(event, "__dict__", check(raw))  # a frozen dataclass, every field checked: no __init__ to run
        if agree is not None:
            agree(event)
        return event

    _MAKERS[kind] = make
    return make


def _node_windows_agree(w: NodeWindows) -> None:
    """What the field checks cannot see: every column a place per rank, each rank once, each region once with its
    ``who`` places in range, each once, and the seconds a value per rank that timed a region (raises ``Malformed``)."""
    n = len(w.ranks)
    if not n or len(set(w.ranks)) != n or not len(w.step) == len(w.steps) == len(w.wall) == n:
        raise Malformed("field 'ranks' must be distinct ranks, one for each place of 'step', 'steps' and 'wall'")
    if len(set(w.regions)) != len(w.regions) or len(w.who) != len(w.regions):
        raise Malformed("field 'regions' must name each region once, each with its 'who'")
    if any(who and (len(set(who)) != len(who) or max(who) >= n) for who in w.who):
        raise Malformed("field 'who' must hold places of 'ranks', each once")
    if not len(w.totals) == len(w.fastest) == sum(len(who) or n for who in w.who):
        raise Malformed("fields 'totals' and 'fastest' must hold a value per rank that timed each region")


_AGREE: dict[type, Callable[[Any], None]] = {NodeWindows: _node_windows_agree}


def _defaults(cls: type) -> dict[str, Any]:
    """The values of ``cls``'s fields that have one (its optional fields)."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            found[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            found[f.name] = f.default_factory()
    return found


# What each event's fields may hold. A node agent cuts what it sends (a rank's error at TRACEBACK_CHARS, its stderr
# tail); these bounds are wider, so no event an agent makes is refused.
_RANK = Int(0, MAX_WORLD_SIZE)
_NODE = Int(0, MAX_WORLD_SIZE)
_HOST = Text(1024)
_CODE = Int(0, 255)
_TIME = Real(-1e12, 1e12)
_COUNT = Int(0, INT_MAX)
_SECONDS = Real(0, 1e12)
_PLACE = Int(0, MAX_SLOTS_PER_HOST - 1)
_REGIONS = 64  # region names in one NodeWindows


def _PER_RANK(spec: Spec) -> ListOf:
    return ListOf(spec, MAX_SLOTS_PER_HOST)  # a value per rank of one node


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
    NodeWindows: (
        {
            **{"node_rank": _NODE, "index": _COUNT, "ranks": _PER_RANK(_RANK), "step": _PER_RANK(_COUNT)},
            **{"steps": _PER_RANK(Int(1, INT_MAX)), "wall": _PER_RANK(_SECONDS)},
            **{"regions": ListOf(Text(64), _REGIONS), "who": ListOf(_PER_RANK(_PLACE), _REGIONS)},
            **{"totals": ListOf(_SECONDS, _REGIONS * MAX_SLOTS_PER_HOST)},
            **{"fastest": ListOf(_SECONDS, _REGIONS * MAX_SLOTS_PER_HOST)},
        },
        {"first_step_at": _SECONDS},
    ),
}
