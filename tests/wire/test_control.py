"""Control lines, launcher -> agent (dslaunch/wire/control.py): parsed whole, never by substring; a job agent's
run and standby lines; and fuzzing: whatever a control stream holds, only commands come out."""

from __future__ import annotations

import base64
import json
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch import wire
from tests.wire.test_decoder import JSON
from tests.wire.test_plan_codec import _plan


def test_control_lines_are_parsed_whole_never_by_substring() -> None:
    reader = wire.ControlReader()
    assert reader.feed(b"nonstop\nstopped\nsignal SIGUSR1X\nsignal SIGKILL\n") == []
    assert reader.feed(b"sto") == []  # half a line waits
    assert reader.feed(b"p\nsignal SIGUSR2\n") == [wire.STOP, int(signal.SIGUSR2)]
    assert wire.ControlReader().feed(wire.control_stop() + wire.control_signal(signal.SIGUSR1)) == [
        wire.STOP,
        int(signal.SIGUSR1),
    ]
    with pytest.raises(wire.WireError):
        wire.control_signal(signal.SIGKILL)
    assert reader.feed(wire.control_signal(signal.SIGQUIT)) == [int(signal.SIGQUIT)]  # stacks (docs/hangs.md)


def test_a_stop_request_line_names_a_stop_signal_and_may_end_the_grace() -> None:
    reader = wire.ControlReader()
    lines = b"stop SIGTERM\nstop SIGINT now\nstop SIGKILL\nstop SIGTERM later\nstop  SIGTERM\nstop sigterm\n"
    assert reader.feed(lines) == [wire.StopRequest(signal.SIGTERM), wire.StopRequest(signal.SIGINT, now=True)]
    assert reader.rejects.count == 4
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        for now in (False, True):
            assert reader.feed(wire.control_request_stop(signum, now)) == [wire.StopRequest(signum, now)]


def test_job_lines_carry_a_node_rank_and_a_plan_and_nothing_else_starts_an_attempt() -> None:
    plan = _plan((("HF_TOKEN", "x y"),))
    assert wire.parse_job_line(wire.job_run(3, plan).rstrip(b"\n")) == (3, plan)
    assert wire.parse_job_line(wire.job_standby(plan).rstrip(b"\n")) == (None, plan)
    for other in (b"stop", b"signal SIGUSR1", b"", b"run", b"run -1 x", b"run 1", b"standby", b"run 1 x y"):
        assert wire.parse_job_line(other) is None, other
    with pytest.raises(wire.WireError):
        wire.parse_job_line(b"run 1 not-a-plan")


@given(st.binary(max_size=200))
def test_a_job_line_either_parses_or_is_ignored_or_is_a_wire_error(line: bytes) -> None:
    try:
        wire.parse_job_line(line)
    except wire.WireError:
        pass


def test_stop_step_control_lines_round_trip_and_only_a_positive_step_is_one() -> None:
    reader = wire.ControlReader()
    got = reader.feed(wire.control_request_stop(signal.SIGTERM) + wire.control_stop_at(1234) + wire.control_stop())
    assert got == [wire.StopRequest(signal.SIGTERM), wire.StopAt(1234), wire.STOP]
    bad = [b"stop-at\n", b"stop-at 0\n", b"stop-at -3\n", b"stop-at 1e3\n", b"stop-at 12 13\n", b"stop-at  7\n"]
    assert reader.feed(b"".join(bad) + b"stop-at " + b"9" * 19 + b"\nstop-at\n") == []
    assert reader.feed(b"stop-at 000042\n") == [wire.StopAt(42)]


@given(st.text(max_size=40))
def test_a_stop_at_line_parses_to_a_positive_step_or_nothing(line: str) -> None:
    step = wire.parse_stop_at(line)
    assert step is None or (step > 0 and line == f"stop-at {line[8:]}" and int(line[8:]) == step)


# ---- the agent's control stream -----------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=200) | st.sampled_from([b"stop\n", b"signal SIGUSR1\n", b"hb\n"]), max_size=8))
def test_the_agents_control_reader_obeys_only_commands_and_counts_the_rest(chunks: list[bytes]) -> None:
    reader = wire.ControlReader()
    allowed = {wire.STOP, *(int(s) for s in (*wire.FORWARDED_SIGNALS, wire.STACKS_SIGNAL))}
    for chunk in chunks:
        assert set(reader.feed(chunk)) <= allowed
    assert len(reader._partial) <= wire.MAX_CONTROL_LINE


def test_a_control_line_that_is_no_command_is_counted_and_a_long_one_is_dropped() -> None:
    reader = wire.ControlReader()
    assert reader.feed(b"hb\nsignal SIGKILL\nstop\nreboot\n") == [wire.STOP]
    assert reader.rejects.count == 2 and "'signal SIGKILL' is no command" in (reader.rejects.first or "")
    assert reader.feed(b"x" * (wire.MAX_CONTROL_LINE + 10)) == []
    assert reader.rejects.count == 3 and reader._partial == b""
    assert reader.feed(b"\nstop\n") == [wire.STOP]  # the rest of the long line is its own junk; then a command


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | JSON.map(lambda v: b"run 1 " + base64.urlsafe_b64encode(json.dumps(v).encode())))
def test_a_job_agents_run_line_decodes_or_raises_wire_error_only(line: bytes) -> None:
    """A plan of the wrong shape (JSON that is no plan) is a WireError the agent reports, not a traceback."""
    try:
        wire.parse_job_line(line)
    except wire.WireError:
        pass
