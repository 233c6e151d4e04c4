"""Real Lightning Fabric, accelerate and torch's @record under dslaunch, behaving as under torchrun (CPU, gloo).

Each takes torchrun's path because the ranks carry torchrun's environment contract (TORCHELASTIC_RUN_ID...)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli

pytestmark = [pytest.mark.torch, pytest.mark.timeout(150), pytest.mark.launch, pytest.mark.torch_api]


def lines(stdout: str, tag: str) -> dict[int, str]:
    """rank -> the rest of its `TAG rank=N ...` line."""
    return {int(m[1]): m[2] for m in re.finditer(rf"{tag} rank=(\d+) (.*)", stdout)}


@pytest.mark.frameworks
def test_fabric_with_devices_matching_the_world() -> None:
    pytest.importorskip("lightning")
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", str(SCRIPTS / "fabric_ranks.py"), "2", "1"])
    assert result.returncode == 0, result.stderr
    assert lines(result.stdout, "FABRIC") == {r: "world=2 node=0 env=TorchElasticEnvironment sum=1" for r in (0, 1)}


@pytest.mark.frameworks
def test_fabric_with_devices_not_matching_the_world_fails_as_under_torchrun() -> None:
    pytest.importorskip("lightning")
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", str(SCRIPTS / "fabric_ranks.py"), "4", "1"])
    assert result.returncode == 1
    # Lightning's TorchElasticEnvironment check, the error torchrun gives; not a hang at "MEMBER: 1/4".
    assert "traceback:" in result.stderr
    message = "but the product (4 * 1) does not match the world size (2)."
    assert f"ValueError: You set `devices=4` and `num_nodes=1` in Lightning, {message}" in result.stderr


@pytest.mark.frameworks
def test_fabric_on_uneven_nodes_takes_ranks_from_the_launcher(tmp_path: Path) -> None:
    """1+3 slots on two local names. Lightning indexes a node's devices by local rank, so devices= must cover the
    biggest node and devices * num_nodes = world: devices=4, num_nodes=1 (torchrun cannot start uneven nodes)."""
    pytest.importorskip("lightning")
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=1\n127.0.0.1 slots=3\n")
    args = ["-H", str(hosts), "--launcher", "local", "--master-port", "0", str(SCRIPTS / "fabric_ranks.py"), "4", "1"]
    result = run_cli(args, timeout=120)
    assert result.returncode == 0, result.stderr
    expected = {r: f"world=4 node={min(r, 1)} env=TorchElasticEnvironment sum=6" for r in range(4)}
    assert lines(result.stdout, "FABRIC") == expected


@pytest.mark.frameworks
def test_accelerate_cpu_sees_rank_and_world() -> None:
    pytest.importorskip("accelerate")
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", str(SCRIPTS / "accelerate_ranks.py")])
    assert result.returncode == 0, result.stderr
    assert lines(result.stdout, "ACCELERATE") == {r: f"local={r} world=2 sum=1" for r in (0, 1)}


def test_record_decorated_script_reports_its_traceback_in_the_summary() -> None:
    """--no-python: no dslaunch bootstrap, only torch's @record writes the error file the agent reads."""
    result = run_cli(["--no-python", sys.executable, str(SCRIPTS / "record_fail.py")])
    assert result.returncode == 1
    summary = result.stderr.split("dslaunch: job failed", 1)[1]
    assert "traceback:" in summary
    assert '|     raise RuntimeError("recorded boom")' in summary
    assert "| RuntimeError: recorded boom" in summary
