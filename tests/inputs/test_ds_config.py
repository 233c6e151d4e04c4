"""ds_config keys of the launcher, logging and mesh, read from --config with the logging precedence
(built-in < config < DSLAUNCH_LOG_LEVEL < command line, DeepSpeed spellings included)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH, SCRIPTS
from tests.plans import cli_error, dry_run_json

SCRIPT = str(SCRIPTS / "view.py")
FULL = {
    "train_batch_size": 8,
    "log_level": "info",
    "wall_clock_breakdown": True,
    "comms_logger": {"enabled": True, "verbose": False},
    "steps_per_print": 10,
    "mesh_param": [2, 2],
}


def _config(tmp_path: Path, data: dict[str, object]) -> str:
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(data))
    return str(path)


def _env(tmp_path: Path, data: dict[str, object], *args: str, shell: dict[str, str] | None = None) -> dict[str, str]:
    plan = dry_run_json(
        ["--config", _config(tmp_path, data), "--nproc-per-node", "4", *args, "train.py"],
        env={"CUDA_VISIBLE_DEVICES": "", "DSLAUNCH_LOG_LEVEL": "", **(shell or {})},
    )
    return plan["env"]  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _no_shell_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSLAUNCH_LOG_LEVEL", raising=False)


def test_every_key_reaches_the_rank_environment(tmp_path: Path) -> None:
    env = _env(tmp_path, FULL)
    assert env["DSLAUNCH_LOG_LEVEL"] == "info"
    assert env["DSLAUNCH_WALL_CLOCK_BREAKDOWN"] == "1" and env["DSLAUNCH_COMMS_LOGGER"] == "1"
    assert env["DSLAUNCH_STEPS_PER_PRINT"] == "10"
    assert env["DSLAUNCH_MESH"] == "dp_shard=2,sp=2"
    assert env["DSLAUNCH_CONFIG"].endswith("ds_config.json")


def test_data_and_sequence_parallel_sizes_make_the_same_mesh(tmp_path: Path) -> None:
    env = _env(tmp_path, {"data_parallel_size": 2, "sequence_parallel_size": 2})
    assert env["DSLAUNCH_MESH"] == "dp_shard=2,sp=2"


@pytest.mark.parametrize(
    ("args", "shell", "level"),
    [
        ([], {}, "info"),  # config over the built-in warning
        ([], {"DSLAUNCH_LOG_LEVEL": "debug"}, "debug"),  # shell over config
        (["--log_level", "error"], {"DSLAUNCH_LOG_LEVEL": "debug"}, "error"),  # command line over both (DeepSpeed#8067)
        (["-q"], {}, "error"),
        (["--log-level", "warning"], {}, "warning"),
    ],
)
def test_log_level_precedence(tmp_path: Path, args: list[str], shell: dict[str, str], level: str) -> None:
    assert _env(tmp_path, FULL, *args, shell=shell)["DSLAUNCH_LOG_LEVEL"] == level


def test_defaults_without_config_keys(tmp_path: Path) -> None:
    env = _env(tmp_path, {"train_batch_size": 8})
    assert env["DSLAUNCH_LOG_LEVEL"] == "warning"  # v1 default, not DeepSpeed's info
    assert "DSLAUNCH_WALL_CLOCK_BREAKDOWN" not in env and "DSLAUNCH_MESH" not in env
    assert "DSLAUNCH_STEPS_PER_PRINT" not in env  # the timers report every step


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"mesh_param": [3, 2]}, "dp(3) * sp(2) = 6 != WORLD_SIZE(4)"),
        ({"mesh_param": "2x2"}, "mesh_param"),
        ({"log_level": "loud"}, "log_level"),
        ({"steps_per_print": 0}, "steps_per_print must be a positive whole number"),
    ],
)
def test_bad_config_keys_exit_2_before_anything_starts(tmp_path: Path, data: dict[str, object], needle: str) -> None:
    code, err = cli_error(
        ["--config", _config(tmp_path, data), "--nproc-per-node", "4", "train.py"], env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert code == 2 and needle in err


@pytest.mark.launch
def test_deepspeed_command_line_with_ds_config_reaches_real_ranks(tmp_path: Path) -> None:
    """`deepspeed --num_gpus 4 --log_level warning train.py --deepspeed_config cfg` with dslaunch instead."""
    cfg = _config(tmp_path, FULL)
    result = subprocess.run(
        [
            *DSLAUNCH,
            "--num_gpus",
            "4",
            "--master_port",
            "0",
            "--log_level",
            "warning",
            "--config",
            cfg,
            SCRIPT,
            "--deepspeed_config",
            cfg,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert result.returncode == 0, result.stderr
    views = [json.loads(line.split("VIEW ", 1)[1]) for line in result.stdout.splitlines() if "VIEW " in line]
    assert sorted(v["rank"] for v in views) == [0, 1, 2, 3]
    for view in views:
        assert view["argv"] == ["--deepspeed_config", cfg]
        assert view["env"] == {
            "DSLAUNCH_LOG_LEVEL": "warning",
            "DSLAUNCH_MESH": "dp_shard=2,sp=2",
            "DSLAUNCH_CONFIG": cfg,
            "DSLAUNCH_WALL_CLOCK_BREAKDOWN": "1",
            "DSLAUNCH_COMMS_LOGGER": "1",
            "DSLAUNCH_STEPS_PER_PRINT": "10",
        }
    assert result.stderr.count("--num_gpus is DeepSpeed's spelling") == 1
    assert result.stderr.count("--log_level is DeepSpeed's spelling") == 1
