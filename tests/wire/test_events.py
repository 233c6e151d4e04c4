"""Events (dslaunch/wire/events.py): each kind encoded on one marked line and decoded back unchanged."""

from __future__ import annotations

import pytest

from dslaunch import wire


@pytest.mark.parametrize(
    "event",
    [
        wire.Spawned(rank=1, local_rank=1, pid=42, host="h"),
        wire.Done(node_rank=3, code=7),
        wire.Done(node_rank=3, code=143, stopped_by=15, stop_requested_at=1000.5),
        wire.StopAsked(node_rank=1, signum=15, ts=1000.5),
        wire.RankExit(1, 1, 0, "h", 42, 134, "SIGABRT", 1.5, False, "Traceback...", ("a", "b")),
        wire.Idle(node_rank=1, idle=True, live=2),
        wire.Stacks(node_rank=1, host="h", ranks=((2, "collective", 3, 5.5), (3, "no-python", 0, 6.0))),
        wire.StopStep(node_rank=2, step=1234),
        wire.StopStep(node_rank=0, step=None),
    ],
)
def test_events_round_trip(event: wire.Event) -> None:
    line = wire.encode(event)
    assert line.startswith(wire.MARKER) and line.endswith("\n") and line.count("\n") == 1
    assert wire.decode(line) == event
