"""The launcher <-> agent wire (pure): plan codec, typed events, exact control lines."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch import wire
from dslaunch.agent import dialback_client
from dslaunch.plan import LaunchPlan
from dslaunch.runners.remote import stage
from tests.plans import cli_error, make_plan


def _plan(env: tuple[tuple[str, str], ...] = ()) -> LaunchPlan:
    return make_plan(launcher="pdsh", args=("a b",), python="/usr/bin/python3", env=env)


def test_plan_round_trips_and_a_bad_one_is_a_clear_error() -> None:
    plan = _plan((("HF_TOKEN", "x y"),))
    assert wire.plan_from_b64(wire.plan_to_b64(plan)) == plan
    with pytest.raises(wire.WireError, match="does not decode"):
        wire.plan_from_b64("not base64 at all!")


def test_plan_file_is_deleted_once_read(tmp_path: Path) -> None:
    path = tmp_path / "p.plan"
    path.write_text(wire.plan_to_b64(_plan()) + "\n")
    assert wire.plan_from_file(str(path)) == _plan()
    assert not path.exists()
    with pytest.raises(wire.WireError, match="cannot read"):
        wire.plan_from_file(str(path))


def test_plan_from_env_removes_it() -> None:
    env = {wire.PLAN_VAR: wire.plan_to_b64(_plan()), "PATH": "/bin"}
    assert wire.plan_from_env(env) == _plan() and env == {"PATH": "/bin"}
    assert wire.plan_from_env(env) is None


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


@given(
    st.lists(st.sampled_from(["[rank0]: out\n", "[rank1]: é " + wire.MARKER + "\n", "EVENT", "\n"]), max_size=30),
    st.lists(st.integers(1, 40), min_size=1, max_size=5),
)
def test_split_events_gives_each_event_line_alone_and_every_byte_in_order(items: list[str], cuts: list[int]) -> None:
    event = wire.encode(wire.Done(node_rank=0, code=0))
    text = "".join(event if item == "EVENT" else item for item in items).encode()
    chunks, pos, i = [], 0, 0
    while pos < len(text):  # arrives in arbitrary pieces, even mid-character
        chunks.append(text[pos : pos + cuts[i % len(cuts)]])
        pos += cuts[i % len(cuts)]
        i += 1
    pieces = list(wire.split_events(chunks))
    assert "".join(pieces).encode() == text
    assert [p for p in pieces if wire.decode(p) is not None] == [event] * items.count("EVENT")
    assert all(p.endswith("\n") for p in pieces)


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


def test_staged_plan_paths_are_per_node_and_quoted() -> None:
    assert stage.plan_path("r1", 3) == ".cache/dslaunch/plans/r1.3.plan"
    assert stage.upload_command("r1", 0) == (
        'umask 077 && mkdir -p "$HOME"/.cache/dslaunch/plans && cat > "$HOME"/.cache/dslaunch/plans/r1.0.plan'
    )  # under $HOME, where the agent reads it, whatever directory the session starts in


@pytest.mark.parametrize("run_id", ["../x", "a b", "a;b", ".hidden", "", "x" * 65, "é"])
def test_run_id_is_a_plain_word(run_id: str) -> None:
    code, err = cli_error(["--run-id", run_id, "--dry-run", "x.py"], env={"DSLAUNCH_RUN_ID": ""})
    assert code == 2 and "--run-id" in err


@pytest.mark.launch
def test_agent_refuses_a_plan_it_cannot_read(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "dslaunch.agent", "--node-rank", "0", "--plan-file", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, wire.PLAN_VAR: ""},
    )
    assert out.returncode == 2 and "cannot read the launch plan" in out.stderr and "Traceback" not in out.stderr


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


def test_a_dial_file_round_trips_and_nothing_else_reads_as_one() -> None:
    secret = bytes(range(32))
    assert dialback_client.parse_dialback(dialback_client.dialback_text(40123, secret, "node1")) == (
        40123,
        secret,
        "node1",
    )
    for bad in [
        "",
        "dslaunch-dial 40123 " + secret.hex(),  # no host
        "dslaunch-dial 0 " + secret.hex() + " node1",  # no port 0
        "dslaunch-dial 70000 " + secret.hex() + " node1",
        "dslaunch-dial 40123 abcd node1",  # a secret too short to guess at
        "dslaunch-dial 40123 zz" + secret.hex() + " node1",
        "dslaunch-dial ٤٠ " + secret.hex() + " node1",  # digits that are not ASCII
        "run 0 " + secret.hex() + " node1",
        "dslaunch-dial 40123 " + secret.hex() + " " + "h" * 254,
    ]:
        with pytest.raises(wire.WireError):
            dialback_client.parse_dialback(bad)


@given(st.text(max_size=300))
def test_a_dial_file_either_parses_or_is_a_wire_error(text: str) -> None:
    try:
        port, secret, host = dialback_client.parse_dialback(text)
    except wire.WireError:
        return
    assert 0 < port < 65536 and len(secret) >= 16 and host and not any(c.isspace() for c in host)


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
