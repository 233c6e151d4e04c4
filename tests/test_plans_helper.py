"""tests/plans.py, the in-process CLI most plan and exit-2 tests use: it leaves no state behind and never acts."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import click
import pytest

from dslaunch.logs import _core
from tests.plans import cli_error, dry_run_json, make_plan, plan_of

ROOT = Path(__file__).resolve().parents[1]


def test_environment_cwd_and_logging_are_as_before(tmp_path: Path) -> None:
    os.environ["DSLAUNCH_TEST_GONE"] = "kept"
    try:
        environ, cwd, logging = dict(os.environ), os.getcwd(), copy.copy(vars(_core.state()))
        plan = dry_run_json(
            ["-H", "hostfiles/uneven.txt", "--log-level", "debug", "t.py"],
            env={"CUDA_VISIBLE_DEVICES": "", "DSLAUNCH_TEST_GONE": None, "DSLAUNCH_NUM_NODES": "2"},
            cwd=ROOT,
        )
        assert plan["env"]["DSLAUNCH_LOG_LEVEL"] == "debug" and len(plan["nodes"]) == 2
        with pytest.raises(click.UsageError):
            plan_of(["--nproc-per-node", "0", "t.py"], env={"DSLAUNCH_TEST_GONE": None}, cwd=tmp_path)
        assert dict(os.environ) == environ and os.getcwd() == cwd
        assert vars(_core.state()) == logging  # nothing configured logging: the plan is never acted on
    finally:
        del os.environ["DSLAUNCH_TEST_GONE"]


def test_env_reaches_the_options_read_from_the_environment() -> None:
    env = {"DSLAUNCH_NPROC_PER_NODE": "3", "CUDA_VISIBLE_DEVICES": ""}
    assert plan_of(["--dry-run", "t.py"], env=env).world_size == 3


def test_cli_error_refuses_a_command_line_that_would_launch() -> None:
    with pytest.raises(AssertionError, match="the command line was accepted: it would start a local job"):
        cli_error([str(ROOT / "examples" / "train.py")])
    code, err = cli_error(["--nproc-per-node", "0", "t.py"])
    assert code == 2 and "not a positive whole number" in err


def test_make_plan_numbers_ranks_in_host_order() -> None:
    plan = make_plan(hosts=("a", "b"), slots=("0", "1"), hang_timeout=3.0)
    assert [(n.host, n.node_rank, n.ranks) for n in plan.nodes] == [("a", 0, (0, 1)), ("b", 1, (2, 3))]
    assert (plan.launcher, plan.run_id, plan.master_addr, plan.master_port) == ("ssh", "r1", "a", 29500)
    assert plan.hang_timeout == 3.0 and plan.program.target == "t.py"
