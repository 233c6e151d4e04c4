"""Every field of every event checked (dslaunch/wire/decoder.py, with wire_check's specs): tables of what is
refused and why, and fuzzing: whatever a marked line holds, nothing is raised, and what is accepted is an event
whose every field has its type and range."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import asdict
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch import wire
from dslaunch.observe.record import Region, Window
from dslaunch.observe.window_relay import node_windows
from dslaunch.wire.decoder import _AGREE
from dslaunch.wire_check import Malformed, fields
from tests.wire.strategies import JSON, ODD, fields_of, near

EVENTS: dict[str, wire.Event] = {
    "spawned": wire.Spawned(rank=3, local_rank=1, pid=42, host="pod-1"),
    "exit": wire.RankExit(3, 1, 1, "pod-1", 42, 7, None, 1.7e9, False, "Traceback ...", ("tail",)),
    "done": wire.Done(node_rank=1, code=0),
    "idle": wire.Idle(node_rank=1, idle=True, live=2),
    "stacks": wire.Stacks(1, "pod-1", ((2, "running", 5, 0.5), (3, "collective", 4, 1.0)), ("/tmp/trace",)),
    "lost": wire.NodeLost(1, "pod-1", -15, "its launcher received SIGTERM"),
}


def _marked(obj: object) -> str:
    return wire.MARKER + json.dumps(obj) + "\n"


def _with(kind: str, **changes: object) -> str:
    return _marked({"ev": kind, **asdict(EVENTS[kind]), **changes})


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_every_event_an_agent_makes_comes_through_unchanged(kind: str) -> None:
    assert wire.decode(wire.encode(EVENTS[kind])) == EVENTS[kind]


REFUSED = {
    "a string exit code (done)": (_with("done", code="0"), "field 'code' must be an integer in 0..255"),
    "a list node rank (idle)": (_with("idle", node_rank=[1]), "field 'node_rank' must be an integer"),
    "a string timestamp (exit)": (_with("exit", ts="1700000000"), "field 'ts' must be a number"),
    "a bool where an int goes": (_with("done", code=True), "field 'code' must be an integer"),
    "an int where a bool goes": (_with("idle", idle=1), "field 'idle' must be true or false"),
    "an exit code over 255": (_with("done", code=256), "integer in 0..255"),
    "a negative rank": (_with("exit", rank=-1), "field 'rank'"),
    "a rank past the largest world": (_with("exit", rank=1 << 40), "field 'rank'"),
    "NaN for a time": (_with("exit", ts=math.nan), "not JSON"),  # orjson refuses NaN; were it parsed, 'ts' would
    "an integer past a float's range for a time": (_with("exit", ts=10**400), "not JSON"),  # infinity to orjson
    "a host of 2000 characters": (_with("spawned", host="h" * 2000), "field 'host' must be a string of at most"),
    "a tail of numbers": (_with("exit", stderr_tail=[1, 2]), "field 'stderr_tail'"),
    "a stacks row too short": (_with("stacks", ranks=[[2, "running", 5]]), "field 'ranks'"),
    "a stacks row with a string count": (_with("stacks", ranks=[[2, "running", "5", 0.5]]), "field 'ranks'"),
    "a missing field": (_marked({"ev": "done", "node_rank": 1}), "no field 'code'"),
    "a field too many": (_with("done", extra=1), "unknown field 'extra'"),
    "an unknown kind": (_marked({"ev": "reboot"}), "no event kind 'reboot'"),
    "a kind that is no string": (_marked({"ev": ["done"]}), "no event kind"),
    "not an object": (_marked([1, 2]), "not a JSON object"),
    "not JSON": (wire.MARKER + "{oops\n", "not JSON"),
    "nesting deep enough to recurse out": (
        wire.MARKER + "[" * 100_000 + "\n",
        "not JSON",
    ),  # orjson: past its depth limit
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_marked_line_of_the_wrong_shape_is_malformed_and_says_why(case: str) -> None:
    line, why = REFUSED[case]
    got = wire.decode_checked(line)
    assert isinstance(got, Malformed) and why in str(got), got
    assert wire.decode(line) is None


def test_ordinary_output_is_no_message_at_all() -> None:
    assert wire.decode_checked("hello\n") is None


@pytest.mark.parametrize(
    "line",
    [
        "plain output\n",
        wire.MARKER + "{not json\n",
        wire.MARKER + '{"ev":"unknown"}\n',
        wire.MARKER + '{"ev":"done","node_rank":1}\n',  # a field missing
        wire.MARKER + '{"ev":"done","node_rank":1,"code":0,"extra":1}\n',
        wire.MARKER + "[1,2]\n",
        "[rank0]: " + wire.MARKER + '{"ev":"done","node_rank":0,"code":0}\n',  # rank output is prefixed
    ],
)
def test_anything_but_a_whole_event_is_output(line: str) -> None:
    assert wire.decode(line) is None


@given(st.text(max_size=200))
def test_decode_never_raises(text: str) -> None:
    wire.decode(wire.MARKER + text)


# ---- fuzzing ----------------------------------------------------------------------------------------------------
def _valid(event: wire.Event) -> bool:
    """Every field in its type and range: what the consumers (job/state.py, pods/) may rely on."""
    d: dict[str, Any] = asdict(event)
    ints = [v for k, v in d.items() if k in ("rank", "local_rank", "node_rank", "pid", "code", "live")]
    return (
        all(type(v) is int and v >= 0 for v in ints)
        and all(type(d[k]) is str for k in ("host", "why") if k in d)
        and all(type(d[k]) is bool for k in ("idle", "by_agent") if k in d)
        and ("ts" not in d or (type(d["ts"]) is float and math.isfinite(d["ts"])))
        and ("code" not in d or d["code"] <= 255)
    )


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from(sorted(EVENTS)), data=st.data(), value=JSON, drop=st.booleans())
def test_fuzzed_fields_give_a_valid_event_or_malformed_and_never_raise(
    kind: str, data: st.DataObject, value: object, drop: bool
) -> None:
    obj: dict[str, object] = {"ev": kind, **asdict(EVENTS[kind])}
    target = data.draw(st.sampled_from(sorted(obj)) | st.text(max_size=8))
    if drop:
        obj.pop(target, None)
    else:
        obj[target] = value
    got = wire.decode_checked(wire.MARKER + json.dumps(obj) + "\n")
    assert got is None or isinstance(got, Malformed) or _valid(got), got


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_after_the_marker_never_raise(tail: bytes) -> None:
    got = wire.decode_checked(wire.MARKER + tail.decode("utf-8", "replace"))
    assert got is None or isinstance(got, Malformed) or _valid(got)


@pytest.mark.parametrize("cls", sorted(wire._SCHEMAS, key=lambda c: c.__name__))
def test_every_field_of_every_event_has_its_check(cls: type) -> None:
    """A field added to an event without its check would make every such event malformed: fields without a default
    are required, fields with one optional."""
    required, optional = wire._SCHEMAS[cls]
    given = dataclasses.fields(cls)
    assert {
        f.name for f in given if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    } == set(required)
    assert {f.name for f in given} == set(required) | set(optional)


# ---- every kind against the decoder: valid ones round-trip, changed ones decode as the reference check says ---------
KIND_OF = {cls: kind for kind, cls in wire._KINDS.items()}


def _reference(line: str) -> object:
    """What the decoder must give (as text, types showing): orjson's parse, then ``wire_check.fields``' loop over
    the fields and the dataclass's ``__init__``, as the decoder did before its checkers were compiled."""
    try:
        raw = orjson.loads(line[len(wire.MARKER) :])
    except ValueError:
        return "Malformed"
    if type(raw) is not dict or type(raw.get("ev")) is not str or raw["ev"] not in wire._KINDS:
        return "Malformed"
    cls = wire._KINDS[raw.pop("ev")]
    try:
        event = cls(**fields(raw, *wire._SCHEMAS[cls]))
    except Malformed:
        return "Malformed"
    return repr(event) if _agrees(event) else "Malformed"


def _agrees(event: wire.Event) -> bool:
    """What the field checks cannot see (a NodeWindows' columns, a place per rank) holds."""
    try:
        _AGREE.get(type(event), lambda _: None)(event)
    except Malformed:
        return False
    return True


def _got(line: str) -> object:
    got = wire.decode_checked(line)
    assert got is not None
    return "Malformed" if isinstance(got, Malformed) else repr(got)


@pytest.mark.parametrize("cls", sorted(wire._SCHEMAS, key=lambda c: c.__name__))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_every_kind_round_trips_and_a_changed_one_decodes_as_the_reference_says(cls: type, data: st.DataObject) -> None:
    required, optional = wire._SCHEMAS[cls]
    obj = data.draw(fields_of(required, optional))
    event = cls(**fields(obj, required, optional))
    if _agrees(event):
        assert repr(wire.decode(wire.encode(event))) == repr(event)  # every field, its type too (1.0, not 1)
    else:
        assert isinstance(wire.decode_checked(wire.encode(event)), Malformed)
    names = sorted({*required, *optional, "ev"})
    change = data.draw(st.sampled_from(["one field", "drop", "add", "cut", "byte"]))
    line = wire.MARKER + json.dumps({"ev": KIND_OF[cls], **obj})
    if change == "one field":
        target = data.draw(st.sampled_from(names))
        spec = {**required, **optional}.get(target)
        value = data.draw(near(spec) if spec is not None else st.sampled_from(sorted(wire._KINDS)) | ODD)
        line = wire.MARKER + json.dumps({"ev": KIND_OF[cls], **obj, target: value})
    elif change == "drop":
        gone = data.draw(st.sampled_from(names))
        line = wire.MARKER + json.dumps({k: v for k, v in {"ev": KIND_OF[cls], **obj}.items() if k != gone})
    elif change == "add":
        line = wire.MARKER + json.dumps({"ev": KIND_OF[cls], **obj, data.draw(st.text(max_size=6)): data.draw(ODD)})
    elif change == "cut":
        line = line[: data.draw(st.integers(len(wire.MARKER), len(line)))]
    else:
        at, byte = data.draw(st.integers(len(wire.MARKER), len(line) - 1)), data.draw(st.characters())
        line = line[:at] + byte + line[at + 1 :]
    assert _got(line) == _reference(line)


@pytest.mark.parametrize("cls", sorted(wire._KINDS.values(), key=lambda c: c.__name__))
def test_every_event_is_a_plain_frozen_dataclass_the_decoder_may_make_without_its_init(cls: type) -> None:
    """The decoder sets a checked event's ``__dict__`` instead of calling ``__init__``: that is only the same where
    ``__init__`` does nothing else (no ``__post_init__``, no slots)."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")


WINDOW = st.builds(
    Window,
    rank=st.just(0),
    index=st.just(1),
    step=st.integers(0, 1 << 40),
    steps=st.integers(1, 100),
    wall=st.floats(0, 1e6),
    regions=st.lists(st.builds(Region, st.sampled_from(["f", "b", "c"]), st.floats(0, 9), st.floats(0, 9)), max_size=4),
    first_step_at=st.sampled_from([0.0, 1.7e9]),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(WINDOW, min_size=1, max_size=9), st.integers(0, 1 << 20))
def test_a_nodes_windows_as_its_agent_makes_them_round_trip(windows: list[Window], node: int) -> None:
    event = node_windows(node, 7, [(rank, w) for rank, w in enumerate(windows)])
    assert repr(wire.decode(wire.encode(event))) == repr(event)
    line = wire.encode(event)
    assert isinstance(wire.decode_checked(line.replace('"who":[', '"who":[[0],')), Malformed)  # a 'who' too many
    twice = wire.decode_checked(line.replace('"ranks":[0', '"ranks":[1'))  # rank 1 twice, where there is a rank 1
    assert isinstance(twice, Malformed) == (len(windows) > 1)
