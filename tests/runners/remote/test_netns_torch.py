"""A 2-node x 2-rank torch/gloo job across two network namespaces with their own hostnames and addresses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbeds.netns_cluster import NetnsCluster
from tests.helpers import SCRIPTS
from tests.runners.remote.launch import run, wait_until_gone

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.cluster]
SCRIPT = str(SCRIPTS / "remote_torch_ranks.py")


@pytest.mark.parametrize("runner", ["ssh"])  # one torch job keeps the suite light; pdsh runs the same plan
def test_gloo_across_namespaces(netns_cluster: NetnsCluster, runner: str, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    run_id = f"gloo{runner}{os.getpid()}"
    env = {"DSLAUNCH_PG_TIMEOUT": "60", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    done = run(
        [
            "--hostfile",
            str(hostfile),
            "--launcher",
            runner,
            "--ssh-config",
            str(netns_cluster.config),
            "--master-port",
            "0",
            "--run-id",
            run_id,
            SCRIPT,
        ],
        cwd=tmp_path,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(4):
        host = "node1" if rank < 2 else "node2"
        assert f"[{host}:rank{rank}]: host={host} rank={rank} world=4 sum=10 ok=True" in done.stdout, done.stdout
    assert wait_until_gone(run_id, 5) == []
