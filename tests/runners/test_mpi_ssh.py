"""MPI runners across real ssh hosts (sshd on loopback aliases): placement, env, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from dslaunch.oslib.ports import listen_port
from dslaunch.runners import mpi
from testbeds.ssh_cluster import ADDRS, SshCluster
from tests.helpers import DSLAUNCH, SCRIPTS, wait_until_gone
from tests.runners.test_mpi import _need

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

SCRIPT = str(SCRIPTS / "rank_report.py")
FLAVOURS = [mpi.OPENMPI, mpi.MPICH]


def _port() -> int:
    return listen_port(ADDRS[0])


def _launch(cluster: SshCluster, flavour: mpi.Flavour, *args: str) -> subprocess.CompletedProcess[str]:
    hostfile = cluster.base / "mpi-hostfile"
    hostfile.write_text("node1 slots=2\nnode2 slots=1\n")
    cmd = [
        *DSLAUNCH,
        "-H",
        str(hostfile),
        "--ssh-config",
        str(cluster.config),
        "--launcher",
        flavour.name,
        "--master-port",
        str(_port()),
        *args,
        SCRIPT,
        "a b",
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, env=env)


@pytest.mark.parametrize("flavour", FLAVOURS, ids=lambda f: f.name)
def test_agents_run_on_their_hosts_over_ssh(ssh_cluster: SshCluster, flavour: mpi.Flavour) -> None:
    _need(flavour)
    result = _launch(ssh_cluster, flavour)
    assert result.returncode == 0, result.stderr
    views = {
        int(v["RANK"]): v
        for v in (json.loads(line.split("REPORT ", 1)[1]) for line in result.stdout.splitlines() if "REPORT " in line)
    }
    assert sorted(views) == [0, 1, 2]
    expect = {0: ("node1", ADDRS[0], "0"), 1: ("node1", ADDRS[0], "0"), 2: ("node2", ADDRS[1], "1")}
    for rank, (host, addr, node_rank) in expect.items():
        view = views[rank]
        assert view["DSLAUNCH_HOST"] == host and view["NODE_RANK"] == node_rank
        assert str(view["SSH_CONNECTION"]).split()[2] == addr  # really started through ssh to that host
        assert view["MASTER_ADDR"] == ADDRS[0] and view["WORLD_SIZE"] == "3" and view["argv"] == ["a b"]
        assert view["mpi_vars"] == []
    assert "[node2:rank2]: REPORT" in result.stdout


@pytest.mark.parametrize("flavour", FLAVOURS, ids=lambda f: f.name)
def test_failure_on_the_second_host_gives_its_exit_code(ssh_cluster: SshCluster, flavour: mpi.Flavour) -> None:
    _need(flavour)
    run_id = f"mpissh{flavour.name}{os.getpid()}"
    started = time.monotonic()
    result = _launch(
        ssh_cluster,
        flavour,
        "--run-id",
        run_id,
        "--export",
        "FAIL_RANK=2",
        "--export",
        "FAIL_CODE=5",
        "--export",
        "FAIL_AFTER=2",
        "--export",
        "SLEEP=60",
    )
    assert result.returncode == 5, result.stderr
    assert "rank 2 (local_rank 0, node 1) on host node2 exited with code 5" in result.stderr
    assert time.monotonic() - started < 45  # node1's ranks were stopped, not left to sleep 60 s
    assert wait_until_gone(run_id, 10) == []
