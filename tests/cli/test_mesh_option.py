"""--mesh and the config's mesh keys at launch time: checked against the plan, passed as DSLAUNCH_MESH.

In-process (tests/plans.py) but for one real dry run and one real refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.plans import cli_error, decision_of, dry_run_json


def plan_env(*args: str) -> dict[str, str]:
    return dry_run_json([*args, "x.py"])["env"]  # type: ignore[no-any-return]


@pytest.mark.launch
def test_the_real_cli_passes_the_mesh_and_refuses_a_bad_one() -> None:
    result = run_cli(["--nproc-per-node", "8", "--mesh", "tp=2, pp=2", "--dry-run", "--json", "x.py"], timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["env"]["DSLAUNCH_MESH"] == "pp=2,dp_shard=-1,tp=2"
    result = run_cli(["--nproc-per-node", "4", "--mesh", "tp=3", "x.py"], timeout=30)
    assert result.returncode == 2, result.stderr
    assert "'--mesh'" in result.stderr and "Traceback" not in result.stderr


def test_mesh_reaches_ranks_as_env() -> None:
    env = plan_env("--nproc-per-node", "8", "--mesh", "tp=2, pp=2")
    assert env["DSLAUNCH_MESH"] == "pp=2,dp_shard=-1,tp=2"


def test_no_mesh_sets_nothing() -> None:
    assert "DSLAUNCH_MESH" not in plan_env("--nproc-per-node", "2")


def test_config_mesh_and_deepspeed_keys(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"mesh": {"tp": 2}}))
    assert plan_env("--nproc-per-node", "4", "--config", str(config))["DSLAUNCH_MESH"] == "dp_shard=-1,tp=2"
    config.write_text(json.dumps({"data_parallel_size": 2, "sequence_parallel_size": 2}))
    assert plan_env("--nproc-per-node", "4", "--config", str(config))["DSLAUNCH_MESH"] == "dp_shard=2,sp=2"
    # --mesh wins over the config.
    assert plan_env("--nproc-per-node", "4", "--config", str(config), "--mesh", "tp=4")["DSLAUNCH_MESH"] == (
        "dp_shard=-1,tp=4"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--nproc-per-node", "8", "--mesh", "pp=2,dp=3,tp=2"],
            "pp(2) * dp(3) * tp(2) = 12 != WORLD_SIZE(8) (the plan has 8 ranks)",
        ),
        (["--nproc-per-node", "4", "--mesh", "tp=3"], "cannot infer dp_shard: WORLD_SIZE(4) is not divisible by tp(3)"),
        (["--nproc-per-node", "4", "--mesh", "mp=2"], "unknown dim 'mp'; valid dims: pp, dp_replicate"),
        (["--nproc-per-node", "4", "--mesh", "tp=2;$(touch /tmp/dslaunch-pwned)"], "needs a size"),
        (["--nproc-per-node", "4", "--mesh", "cp=2,sp=2"], "cp and sp cannot both be > 1"),
    ],
)
def test_bad_mesh_exits_2_before_anything_starts(args: list[str], message: str) -> None:
    code, err = cli_error([*args, "x.py"])
    assert code == 2, err
    assert message in err
    assert "'--mesh'" in err


def test_bad_config_mesh_names_the_config(tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"mesh": {"tp": 0}}))
    code, err = cli_error(["--nproc-per-node", "2", "--config", str(config), "x.py"])
    assert code == 2
    assert "'--config'" in err and "tp must be a positive whole number or -1 (got 0)" in err


def test_locality_warning_on_multi_node_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("n1 slots=3\nn2 slots=3\n")
    decision_of(["-H", str(hostfile), "--mesh", "tp=2", "--dry-run", "x.py"])
    assert "warning: mesh: tp=2 does not divide the 3 ranks per node" in capsys.readouterr().err
