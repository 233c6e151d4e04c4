"""msgspec mirrors of the hot event kinds, for bench/bench_wire.py: typed, constrained Structs in a tagged union,
what the wire's decoder would be had it adopted msgspec (issue 54: measured, not adopted; docs/benchmarks.md).
Needs msgspec, which dslaunch does not depend on: ``pip install msgspec``. No ``from __future__ import
annotations``: msgspec reads the annotations at class creation."""

from typing import Annotated, Any, Union

import msgspec

from dslaunch import wire

meta = msgspec.Meta
Rank = Annotated[int, meta(ge=0, le=1 << 20)]
Count = Annotated[int, meta(ge=0, le=(1 << 63) - 1)]
Host = Annotated[str, meta(max_length=1024)]
Time = Annotated[float, meta(ge=-1e12, le=1e12)]
Seconds = Annotated[float, meta(ge=0, le=1e12)]
Code = Annotated[int, meta(ge=0, le=255)]
Signum = Annotated[int, meta(ge=1, le=64)]
Step = Annotated[int, meta(ge=1, le=1 << 62)]
Word = Annotated[str, meta(max_length=64)]
opts: dict[str, Any] = {"frozen": True, "forbid_unknown_fields": True, "tag_field": "ev"}


class Idle(msgspec.Struct, tag="idle", **opts):
    node_rank: Rank
    idle: bool
    live: Rank = 1


class StopStep(msgspec.Struct, tag="stopstep", **opts):
    node_rank: Rank
    step: Step | None


class Done(msgspec.Struct, tag="done", **opts):
    node_rank: Rank
    code: Code
    stopped_by: Signum | None = None
    stop_requested_at: Time | None = None


class Spawned(msgspec.Struct, tag="spawned", **opts):
    rank: Rank
    local_rank: Rank
    pid: Count
    host: Host


class RankExit(msgspec.Struct, tag="exit", **opts):
    rank: Rank
    local_rank: Rank
    node_rank: Rank
    host: Host
    pid: Count
    code: Code
    signal: Word | None
    ts: Time
    by_agent: bool
    error: Annotated[str, meta(max_length=1 << 20)] | None = None
    stderr_tail: Annotated[tuple[Annotated[str, meta(max_length=1 << 16)], ...], meta(max_length=4096)] = ()
    beats: Count = 0


class TimerWindow(msgspec.Struct, tag="window", **opts):
    node_rank: Count
    rank: Count
    index: Count
    step: Count
    steps: Annotated[int, meta(ge=1, le=(1 << 63) - 1)]
    wall: Seconds
    regions: Annotated[tuple[tuple[Word, Seconds, Seconds], ...], meta(max_length=64)]
    first_step_at: Seconds = 0.0


class Stacks(msgspec.Struct, tag="stacks", **opts):
    node_rank: Rank
    host: Host
    ranks: Annotated[tuple[tuple[Rank, Word, Count, Time], ...], meta(max_length=1 << 16)]
    traces: tuple[Annotated[str, meta(max_length=4096)], ...] = ()


_decoder = msgspec.json.Decoder(Union[Idle, StopStep, Done, Spawned, RankExit, TimerWindow, Stacks])  # noqa: UP007
_START = len(wire.MARKER)


def decode(line: str) -> object:
    try:
        return _decoder.decode(line[_START:])
    except msgspec.ValidationError as exc:
        return exc
