"""Real torch ranks: dslaunch.engine() initialises gloo, adopts a user's group, and works without a launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api]
SCRIPT = str(SCRIPTS / "engine_ranks.py")
FAST = {"DSLAUNCH_PG_TIMEOUT": "60", "CUDA_VISIBLE_DEVICES": ""}


@pytest.mark.parametrize("mode", ["engine", "adopt"])
def test_two_ranks_all_reduce_through_the_engine(mode: str) -> None:
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", SCRIPT], env={**FAST, "MODE": mode}, timeout=120)
    assert result.returncode == 0, result.stderr
    owns = "True" if mode == "engine" else "False"
    for rank in range(2):
        assert (
            f"[rank{rank}]: rank={rank} local_rank={rank} world=2 device=cpu backend=gloo owns={owns} sum=3 ok=True"
            in result.stdout
        ), result.stdout


@pytest.mark.parametrize("exported", [{}, {"MASTER_ADDR": "127.0.0.1"}], ids=["bare", "master-addr-only"])
def test_plain_python_is_a_world_of_one(exported: dict[str, str]) -> None:
    """A world of one needs no rendezvous: a MASTER_ADDR left in the shell (no MASTER_PORT) is no reason to fail."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run(
        [sys.executable, SCRIPT], capture_output=True, text=True, env={**env, **FAST, **exported}, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "rank=0 local_rank=0 world=1 device=cpu backend=gloo owns=True sum=1 ok=True" in out.stdout


def test_engine_under_torchrun() -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", SCRIPT],
        capture_output=True,
        text=True,
        env={**os.environ, **FAST, "MODE": "engine"},
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("world=2 device=cpu backend=gloo owns=True sum=3 ok=True") == 2, out.stdout
