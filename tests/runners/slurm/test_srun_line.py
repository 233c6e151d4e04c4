"""The srun line and the in-step entry point (pure: golden argv, payloads, plan round trip)."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch import wire
from dslaunch.plan import LaunchPlan
from dslaunch.runners.slurm.runner import SlurmRunner
from dslaunch.runners.slurm.task import _with_local_gpus
from dslaunch.slurmlib import layout, srun
from dslaunch.slurmlib.task_plan import node_rank_of
from tests.plans import make_plan


def _plan(args: tuple[str, ...] = (), launcher_args: tuple[str, ...] = ()) -> LaunchPlan:
    return make_plan(
        launcher="slurm",
        run_id="r7",
        nodes=layout.rank_nodes(("gpu01", "gpu02"), ("0", "1")),
        master_port=0,
        target="train.py",
        args=args,
        python="/venv/bin/python",
        env=(("DSLAUNCH_LOG_LEVEL", "info"),),
        launcher_args=launcher_args,
    )


def test_golden_srun_line() -> None:
    argv = srun.srun_argv(_plan(), exclude=["gpu09"], launcher_args=["--cpu-bind=none"])
    assert argv[:8] == [
        "srun",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--nodelist=gpu01,gpu02",
        "--kill-on-bad-exit=1",
        "--job-name=dslaunch-r7",
        "--exclude=gpu09",
        "--cpu-bind=none",
    ]
    assert argv[8:11] == ["/venv/bin/python", "-m", "dslaunch.runners.slurm.task"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(min_size=0, max_size=12), max_size=4), st.lists(st.text(min_size=1, max_size=12), max_size=3))
def test_payloads_survive_the_srun_line(script_args: list[str], launcher_args: list[str]) -> None:
    plan = _plan(tuple(script_args))
    argv = srun.srun_argv(plan, launcher_args=launcher_args)
    assert argv[6 : 6 + len(launcher_args)] == launcher_args  # passed through untouched, one argv item each
    assert argv[-3:] == [plan.program.python, "-m", "dslaunch.runners.slurm.task"]  # no plan on the command line
    env = srun.srun_env(plan, {"PATH": "/bin"})
    assert wire.plan_from_env(env) == plan and wire.PLAN_VAR not in env  # read once, then gone


@pytest.mark.parametrize(
    "export, option",
    [
        (None, []),
        ("ALL", []),
        ("ALL,FOO", []),
        ("NONE", ["--export=DSLAUNCH_PLAN_B64"]),
        ("FOO,BAR", ["--export=FOO,BAR,DSLAUNCH_PLAN_B64"]),
    ],
)
def test_a_narrowed_slurm_export_still_carries_the_plan(export: str | None, option: list[str]) -> None:
    environ = {} if export is None else {"SLURM_EXPORT_ENV": export}
    assert srun.export_option(environ) == option
    assert srun.srun_argv(_plan(), environ=environ)[6 : 6 + len(option)] == option


def test_dry_run_line_is_shell_quoted_and_hides_the_plan() -> None:
    plan = _plan(("; rm -rf /",), launcher_args=("--comment=a b;c",))
    (line,) = SlurmRunner().describe(plan)
    command, _, note = line.partition("  # ")
    assert note == "plan in $DSLAUNCH_PLAN_B64"
    assert shlex.split(command)[6] == "--comment=a b;c"
    assert "rm -rf" not in line


def test_node_rank_by_slurm_node_name_then_nodeid() -> None:
    plan = _plan()
    assert node_rank_of(plan, {"SLURMD_NODENAME": "gpu02", "SLURM_NODEID": "0"}) == 1
    assert node_rank_of(plan, {"SLURMD_NODENAME": "other", "SLURM_NODEID": "1"}) == 1
    with pytest.raises(layout.SlurmLayoutError):
        node_rank_of(plan, {"SLURMD_NODENAME": "other", "SLURM_NODEID": "5"})


def test_each_task_uses_the_gpus_slurm_bound_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    plan = _with_local_gpus(_plan(), 1)
    assert plan.node(1).slots == ("4", "5") and plan.node(0).slots == ("0", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")
    assert _with_local_gpus(_plan(), 1).node(1).slots == ("0", "1")  # too few: keep the plan's
