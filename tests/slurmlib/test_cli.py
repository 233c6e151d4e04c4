"""The Slurm option area on fake SLURM_* environments: dry-run plans, srun lines, bad input (exit 2).

In-process (tests/plans.py) but for one real dry run and one real refusal."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dslaunch.slurmlib import layout
from tests.helpers import SCRIPTS
from tests.plans import cli_error, dry_run_json

SCRIPT = str(SCRIPTS / "show_env.py")
# Node names that resolve without Slurm, so no scontrol is asked for addresses.
ALLOC = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "localhost,127.0.0.[2-3]", "SLURM_NNODES": "3"}
STEP = {
    **ALLOC,
    "SLURM_STEP_ID": "4",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NODEID": "1",
    "SLURM_STEP_NODELIST": "localhost,127.0.0.2",
    "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
    "SLURMD_NODENAME": "127.0.0.2",
}


def _env(extra: dict[str, str]) -> dict[str, str | None]:
    """Only ``extra`` of Slurm's (and no RANK*) names: ``None`` drops a name from the environment."""
    gone: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("SLURM_", "RANK"))}
    return {**gone, **extra}


def _cli(args: list[str], extra: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in {**os.environ, **_env(extra)}.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-m", "dslaunch", *args], capture_output=True, text=True, timeout=60, env=env
    )


def _plan(args: list[str], extra: dict[str, str]) -> dict:  # type: ignore[type-arg]
    return dry_run_json([*args, SCRIPT, "a b"], env=_env(extra))  # type: ignore[no-any-return]


@pytest.mark.launch
def test_allocation_srun_line() -> None:
    """The real CLI: the golden srun line of an allocation."""
    res = _cli(["--dry-run", "--json", "--nproc-per-node", "2", "--run-id", "r1", SCRIPT, "a b"], ALLOC)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["launcher"] == "slurm" and plan["world_size"] == 6
    assert [n["host"] for n in plan["nodes"]] == ["localhost", "127.0.0.2", "127.0.0.3"]
    assert plan["master_addr"] == "localhost"
    assert plan["master_port"] == 0  # derived inside the step, alike on every node
    assert plan["commands"] == [
        "srun --nodes=3 --ntasks-per-node=1 --nodelist=localhost,127.0.0.2,127.0.0.3 --kill-on-bad-exit=1 "
        f"--job-name=dslaunch-r1 {sys.executable} -m dslaunch.runners.slurm.task  # plan in $DSLAUNCH_PLAN_B64"
    ]


def test_include_exclude_map_to_nodelist_and_exclude_and_launcher_args_pass_through() -> None:
    plan = _plan(
        [
            "--include",
            "127.0.0.[2-3]",
            "--exclude",
            "127.0.0.3",
            "--master-port",
            "31000",
            "--run-id",
            "r2",
            "--launcher-args",
            "--cpu-bind=none --mpi=none",
        ],
        ALLOC,
    )
    assert plan["master_port"] == 31000 and plan["master_addr"] == "127.0.0.2"
    assert plan["commands"][0].startswith(
        "srun --nodes=1 --ntasks-per-node=1 --nodelist=127.0.0.2 --kill-on-bad-exit=1 --job-name=dslaunch-r2 "
        "--exclude=127.0.0.3 "
        "--cpu-bind=none --mpi=none "
    )


def test_auto_outside_slurm_is_unchanged_and_a_hostfile_wins_inside(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _plan([], {})["launcher"] == "local"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")
    assert _plan(["-H", str(hostfile)], ALLOC)["launcher"] == "local"
    assert _plan(["--launcher", "local"], STEP)["launcher"] == "local"


def test_step_node_mode_plan() -> None:
    plan = _plan(["--nproc-per-node", "2"], STEP)
    assert plan["launcher"] == "slurm" and plan["world_size"] == 4
    assert [(n["host"], n["ranks"]) for n in plan["nodes"]] == [("localhost", [0, 1]), ("127.0.0.2", [2, 3])]
    assert plan["master_port"] == layout.derive_port(77, 4)
    assert "node agent of node 1" in plan["commands"][0]


def test_step_rank_mode_plan() -> None:
    step = {
        **STEP,
        "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
    }
    plan = _plan([], step)
    assert [(n["host"], n["ranks"]) for n in plan["nodes"]] == [("localhost", [0, 1]), ("127.0.0.2", [2, 3])]
    assert "becomes its rank" in plan["commands"][0]


def test_allocation_nodes_past_num_nodes_are_spares_and_a_range_takes_up_to_max() -> None:
    plan = _plan(["--num-nodes", "2", "--dry-run"], ALLOC)
    assert [n["host"] for n in plan["nodes"]] == ["localhost", "127.0.0.2"]
    assert "--nodelist=localhost,127.0.0.2 " in plan["commands"][0]
    assert plan["spares"] == ["127.0.0.3"] and plan["nnodes"] == [2, 2]
    ranged = _plan(["--nnodes", "1:2", "--exclude", "localhost"], ALLOC)
    assert [n["host"] for n in ranged["nodes"]] == ["127.0.0.2", "127.0.0.3"] and ranged["spares"] == []
    assert "--exclude=localhost" in ranged["commands"][0]
    whole = _plan(["--num-nodes", "3"], ALLOC)
    assert len(whole["nodes"]) == 3 and "spares" not in whole


@pytest.mark.parametrize(
    ("args", "extra", "words"),
    [
        (["--launcher", "slurm"], {}, ["SLURM_JOB_ID is not set", "salloc"]),
        (["--include", "localhost:0"], ALLOC, ["only whole nodes"]),
        (["--include", "n9"], ALLOC, ["n9 not in this allocation"]),
        (["--exclude", "localhost,127.0.0.[2-3]"], ALLOC, ["no nodes of the allocation are left"]),
        (["--num-nodes", "4"], ALLOC, ["--num-nodes 4 asks for at least 4 node(s) but only 3 of the allocation"]),
        (["--nnodes", "4:5"], ALLOC, ["--nnodes 4:5 asks for at least 4", "localhost, 127.0.0.2, 127.0.0.3"]),
        (["--nnodes", "1:2", "--num-nodes", "2"], ALLOC, ["either --nnodes MIN:MAX or --num-nodes N"]),
        (["--nnodes", "1:2"], STEP, ["inside an srun step", "from the allocation"]),
        (["--launcher-args", "-N 3"], ALLOC, ["'-N' is set by dslaunch"]),
        (["--include", "n[1-"], ALLOC, ["unclosed '['"]),
        (
            ["--nproc-per-node", "2"],
            {**STEP, "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)"},
            ["double spawn", "--ntasks-per-node=1"],
        ),
        (["--exclude", "localhost"], STEP, ["drop --exclude", "srun --nodelist/--exclude"]),
        ([], {**STEP, "SLURM_STEP_TASKS_PER_NODE": "1,2"}, ["does not add up"]),
        (["--nproc-per-node", "2", "--mesh", "dp=3"], STEP, ["4 ranks"]),  # checked against Slurm's world size
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], extra: dict[str, str], words: list[str]) -> None:
    code, err = cli_error([*args, SCRIPT], env=_env(extra))
    assert code == 2, err
    for word in words:
        assert word in err


@pytest.mark.launch
def test_missing_script_in_a_step_is_a_usage_error() -> None:
    """The real CLI in a fake step: one line, exit 2."""
    res = _cli(["/nonexistent/train.py"], STEP)
    assert res.returncode == 2 and "does not exist" in res.stderr
    assert "Traceback" not in res.stderr


def test_node_mode_defaults_to_the_gpus_slurm_gave_the_task() -> None:
    plan = _plan([], {**STEP, "CUDA_VISIBLE_DEVICES": "2,3"})
    assert [(n["slots"], n["ranks"]) for n in plan["nodes"]] == [(["2", "3"], [0, 1]), (["2", "3"], [2, 3])]
    plan = _plan(["--nproc-per-node", "1"], {**STEP, "CUDA_VISIBLE_DEVICES": "2,3"})
    assert [n["slots"] for n in plan["nodes"]] == [["2"], ["2"]]


def test_allocation_ranks_per_node_follow_slurm_gpus_per_node() -> None:
    plan = _plan([], {**ALLOC, "SLURM_GPUS_PER_NODE": "a100:4"})
    assert plan["world_size"] == 12 and plan["nodes"][0]["slots"] == ["0", "1", "2", "3"]
