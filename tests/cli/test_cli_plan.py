"""The CLI's plan: dry-run output (golden, from a real ``dslaunch``), rank layout, and bad input (exit 2, no
traceback), the last two in-process (tests/plans.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.plans import cli_error, dry_run_json, dry_run_output, invoke

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"
CLEAN_ENV = {"CUDA_VISIBLE_DEVICES": ""}


def dry_json(*args: str, env: dict[str, str] | None = None) -> dict:  # type: ignore[type-arg]
    return dry_run_json(args, env={**CLEAN_ENV, **(env or {})}, cwd=ROOT)  # type: ignore[no-any-return]


def normalise(plan: dict) -> dict:  # type: ignore[type-arg]
    """Drop what depends on the machine (interpreter path, cwd) and the caller's exported environment."""
    plan = dict(plan)
    plan.pop("commands")
    plan.pop("env", None)
    return plan


GOLDEN_ARGS = ("-H", "hostfiles/uneven.txt", "--master-addr", "10.0.0.1", "--launcher", "local")
GOLDEN_ARGS += ("train.py", "--lr", "3e-4", "it's")


@pytest.mark.launch
def test_dry_run_json_golden() -> None:
    """Uneven slots: ranks are numbered in hostfile order, the plan is a stable JSON object, and the real CLI
    prints what the in-process path of every other test here builds."""
    result = run_cli(["--dry-run", "--json", *GOLDEN_ARGS], env=CLEAN_ENV, cwd=str(ROOT))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    golden = GOLDEN / "dry_run_uneven.json"
    if os.environ.get("DSLAUNCH_REGEN_GOLDEN"):
        golden.write_text(json.dumps(normalise(plan), indent=2) + "\n")
    assert normalise(plan) == json.loads(golden.read_text()), "delete or regenerate the golden file if intended"
    in_process = dry_json(*GOLDEN_ARGS)
    assert {**in_process, "run_id": None} == {**plan, "run_id": None}


def test_dry_run_text_names_every_node() -> None:
    out = dry_run_output(
        ["-H", "hostfiles/two-nodes.txt", "-i", "worker-0:1@worker-1", "--launcher", "local", "t.py"],
        cwd=ROOT,
        env=CLEAN_ENV,
    )
    assert "world size   5 rank(s) on 2 node(s)" in out
    assert "node 0   worker-0  slots 1" in out
    assert "ranks 1-4" in out
    assert "rendezvous   127.0.0.1:29500" in out  # a local run keeps rendezvous local


def test_local_default_is_one_rank_on_localhost() -> None:
    plan = dry_json("t.py")
    assert plan["launcher"] == "local"
    assert plan["nodes"] == [{"host": "localhost", "node_rank": 0, "slots": ["0"], "ranks": [0]}]
    assert (plan["master_addr"], plan["master_port"]) == ("127.0.0.1", 29500)


def test_visible_devices_are_labels_in_user_order() -> None:
    plan = dry_json("--nproc-per-node", "2", "t.py", env={"CUDA_VISIBLE_DEVICES": "3,1,2"})
    assert plan["nodes"][0]["slots"] == ["3", "1"]
    plan = dry_json("-i", "localhost:2", "t.py", env={"CUDA_VISIBLE_DEVICES": "3,1,2"})
    assert plan["nodes"][0]["slots"] == ["2"]


def test_num_nodes_and_num_gpus() -> None:
    plan = dry_json(
        "-H", "hostfiles/two-nodes.txt", "--num-nodes", "1", "--num-gpus", "2", "--launcher", "local", "t.py"
    )
    assert plan["world_size"] == 2
    assert [n["host"] for n in plan["nodes"]] == ["worker-0"]


def test_script_args_are_not_options() -> None:
    plan = dry_json("t.py", "--dry-run", "-H", "nope", "--", "x")
    assert plan["program"]["args"] == ["--dry-run", "-H", "nope", "--", "x"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-H", "/does/not/exist", "t.py"], "hostfile '/does/not/exist' does not exist"),
        (["-H", "tests/cli/golden/bad_hostfile.txt", "t.py"], "bad_hostfile.txt:3 'worker-2 slots=two'"),
        (
            ["-H", "hostfiles/two-nodes.txt", "-i", "worker-9", "t.py"],
            "host 'worker-9' is not in the hostfile; known hosts: worker-0, worker-1",
        ),
        (["-H", "hostfiles/two-nodes.txt", "-e", "worker-0:7", "t.py"], "no slot '7' on host 'worker-0'"),
        (["-H", "hostfiles/two-nodes.txt", "-i", "worker-0", "--num-nodes", "1", "t.py"], "cannot be combined"),
        (["-i", "localhost", "--num-gpus", "1", "t.py"], "cannot be combined"),
        (["-i", "localhost", "-e", "localhost", "t.py"], "mutually exclusive"),
        (["--num-nodes", "2", "t.py"], "no hostfile"),
        (["--nproc-per-node", "zero", "t.py"], "'zero' is not a positive whole number, gpu, cpu or auto"),
        (["--nproc-per-node", "0", "t.py"], "not a positive whole number"),
        (["--master-port", "70000", "t.py"], "70000"),
        (["-m", "--no-python", "t.py"], "--module and --no-python cannot be used together"),
        (["--launcher", "pdhs", "t.py"], "unknown launcher 'pdhs'; known: auto, "),
        (
            ["--launcher", "node", "t.py"],
            "unknown launcher 'node'; known: auto, local, mpich, openmpi, pdsh, slurm, ssh",
        ),
        (["/no/such/script.py"], "script '/no/such/script.py' does not exist"),
        ([], "Missing argument 'SCRIPT'"),
        (["--config", "hostfiles/uneven.txt", "t.py"], "is not valid JSON"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], message: str) -> None:
    code, err = cli_error(args, cwd=ROOT, env=CLEAN_ENV)
    assert code == 2, err
    assert message in " ".join(err.split()), err


@pytest.mark.launch
def test_a_free_port_on_an_unknown_address_is_refused_by_the_real_cli_without_a_traceback() -> None:
    """Found where the port is picked, at launch: the real process, exit 2 all the same."""
    args = ["--master-addr", "no-such-host.invalid", "--master-port", "0", "tests/scripts/touch_env.py"]
    result = run_cli(args, cwd=str(ROOT), env=CLEAN_ENV)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "cannot pick a free port on 'no-such-host.invalid'" in " ".join(result.stderr.split()), result.stderr
    assert "Traceback" not in result.stderr


def test_version_and_help() -> None:
    assert invoke(["--version"]).stdout.startswith("dslaunch 0.")
    help_text = invoke(["--help"]).stdout
    for flag in (
        "--hostfile",
        "--include",
        "--exclude",
        "--num-nodes",
        "--nproc-per-node",
        "--num-gpus",
        "--launcher",
        "--master-addr",
        "--master-port",
        "--module",
        "--no-python",
        "--log-dir",
        "--shutdown-timeout",
        "--dry-run",
        "--json",
        "--version",
    ):
        assert flag in help_text
