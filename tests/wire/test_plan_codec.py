"""The plan on the wire (dslaunch/wire/plan_codec.py): its codec, its staged file, and a dial file beside it."""

from __future__ import annotations

import os
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
