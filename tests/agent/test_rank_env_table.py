"""docs/migration.md's rank-environment table against what real torchrun and dslaunch ranks get."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS

pytestmark = pytest.mark.launch

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
DUMP = SCRIPTS / "dump_env.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
COLUMNS = {"torchrun": 2, "deepspeed": 3, "dslaunch": 4}
# What both launchers must agree on, value for value, in a 2-rank local job.
SAME_AS_TORCHRUN = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_NAME",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "OMP_NUM_THREADS",
]


def table() -> dict[str, list[str]]:
    """variable -> its row's cells, from the `## The rank environment` section."""
    section = GUIDE.read_text().split("## The rank environment", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 5, line
        assert all(re.fullmatch(r"yes|—|if .+", c) for c in cells[2:]), line
        for name in re.findall(r"`([A-Z_]+)`", cells[0]):
            rows[name] = cells
    return rows


def set_in_plain_run(launcher: str) -> set[str]:
    return {name for name, cells in table().items() if cells[COLUMNS[launcher]] == "yes"}


def bare_env() -> dict[str, str]:
    """This environment without any variable of the table, so that what a rank has of them, its launcher set."""
    names = set(table())
    return {k: v for k, v in os.environ.items() if k not in names and not k.startswith(("DSLAUNCH_", "TORCHELASTIC_"))}


def ranks(out: Path) -> list[dict[str, str]]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def added(env: dict[str, str], base: dict[str, str]) -> set[str]:
    return {k for k in env if k not in base}


RUN_ID = f"envtable{os.getpid()}"  # per test process: jobs of two workers never share a run id (or a sweep)


def dslaunch_ranks(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> list[dict[str, str]]:
    base = {**bare_env(), "OUT_DIR": str(tmp_path), **(env or {})}
    args = ["--nproc-per-node", "2", "--master-port", "0", "--run-id", RUN_ID, *extra, str(DUMP)]
    result = subprocess.run(
        [sys.executable, "-m", "dslaunch", *args], env=base, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return ranks(tmp_path)


def test_table_lists_what_dslaunch_sets_and_the_contract_values(tmp_path: Path) -> None:
    base = bare_env()
    seen = dslaunch_ranks(tmp_path)
    for rank, env in enumerate(seen):
        assert added(env, {**base, "OUT_DIR": ""}) == set_in_plain_run("dslaunch")
        assert env["TORCHELASTIC_RUN_ID"] == env["DSLAUNCH_RUN_ID"] == RUN_ID
        assert env["TORCHELASTIC_ERROR_FILE"] == env["DSLAUNCH_ERROR_FILE"]
        assert env["TORCHELASTIC_ERROR_FILE"].endswith(f"rank{rank}.error.json")
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        assert (env["ROLE_NAME"], env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == (
            "default",
            "0",
            "0",
        )
        assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


@pytest.mark.parametrize(
    ("name", "torch_value"), [("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"), ("NCCL_ASYNC_ERROR_HANDLING", None)]
)
def test_user_value_of_a_default_wins_and_run_facts_do_not(tmp_path: Path, name: str, torch_value: str | None) -> None:
    seen = dslaunch_ranks(tmp_path, "--export", "TORCHELASTIC_RUN_ID=stale", env={name: "3"})
    assert {e[name] for e in seen} == {"3"}
    assert {e.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") for e in seen} == {torch_value}  # torch prefers TORCH_*
    assert {e["TORCHELASTIC_RUN_ID"] for e in seen} == {RUN_ID}


@pytest.mark.torch_api
@pytest.mark.torch  # the torchrun launcher imports torch; its ranks do not
def test_table_lists_what_torchrun_sets_and_dslaunch_matches_it(tmp_path: Path) -> None:
    base = {**bare_env(), "OUT_DIR": str(tmp_path / "tr")}
    (tmp_path / "tr").mkdir()
    result = subprocess.run(
        [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", str(DUMP)],
        env=base,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    torchrun = ranks(tmp_path / "tr")
    (tmp_path / "ds").mkdir()
    ours = dslaunch_ranks(tmp_path / "ds")
    for rank in range(2):
        assert added(torchrun[rank], base) == set_in_plain_run("torchrun")
        for name in SAME_AS_TORCHRUN:
            assert ours[rank][name] == torchrun[rank][name], name
