"""--nnodes MIN:MAX and spare hosts over real sshd (ssh and pdsh): dead hosts left out, a lost node replaced."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS
from tests.runners.remote.launch import (
    RUNNERS,
    base_args,
    job_processes,
    records,
    run,
    start,
    wait_ready,
    wait_until_gone,
)

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

JOB = str(SCRIPTS / "elastic_job.py")
DEAD = "127.0.0.9"  # a loopback address nothing listens on: "connection refused" at once
ADDRESS = {"node1": "127.0.0.2", "node2": "127.0.0.3", "node3": "127.0.0.4"}


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_dead_host_is_left_out_of_a_node_range(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    run_id = f"el23{runner}{os.getpid()}"
    where = base_args(ssh_cluster, runner, ["node1", DEAD, "node2"])
    res = run([*where, "--nnodes", "2:3", "--run-id", run_id, JOB, "echo"], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"left out: {DEAD} (" in res.stderr, res.stderr
    seen = records(res.stdout)
    assert [r["rank"] for r in seen] == [0, 1, 2, 3] and {r["world"] for r in seen} == {4}, res.stdout
    assert {r["host"] for r in seen} == {ADDRESS["node1"], ADDRESS["node2"]}
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_below_the_minimum_fails_fast_naming_the_dead_host(
    ssh_cluster: SshCluster, runner: str, tmp_path: Path
) -> None:
    run_id = f"el22{runner}{os.getpid()}"
    where = base_args(ssh_cluster, runner, ["node1", DEAD])
    began = time.monotonic()
    res = run([*where, "--nnodes", "2:2", "--max-restarts", "3", "--run-id", run_id, JOB, "echo"], cwd=tmp_path)
    assert res.returncode == 255, res.stderr
    assert time.monotonic() - began < 20
    assert "the job needs 2 node(s) and only 1 host(s) are usable (node1)" in res.stderr, res.stderr
    assert f"  {DEAD}: not usable:" in res.stderr and "no spare host is left" in res.stderr
    assert "restarting" not in res.stderr and records(res.stdout) == []
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_spare_replaces_a_node_whose_agent_was_killed(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    run_id = f"elspare{runner}{os.getpid()}"
    where = base_args(ssh_cluster, runner, ["node1", "node2", "node3"])
    args = [*where, "--num-nodes", "2", "--max-restarts", "1", "--restart-delay", "0", "--master-port", "0"]
    proc = start([*args, "--run-id", run_id, JOB, "sleep-first", str(tmp_path)], cwd=tmp_path)
    assert wait_ready(tmp_path, 4), "ranks did not start"
    rank0 = next(p for p in job_processes(run_id) if p.environ().get("RANK") == "0")
    agent = rank0.parent()
    assert agent is not None and "dslaunch" in " ".join(agent.cmdline()), agent
    agent.kill()  # node1's agent: node1 is the rendezvous host of attempt 0
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "left out: node1 (its node agent or connection was lost" in err, err
    assert "attempt 2 runs on node2, node3 (4 ranks)" in err
    assert "attempt 1 on node1, node2: exit" in err and "attempt 2 on node2, node3: exit 0: succeeded" in err
    seen = records(out)
    assert [r["rank"] for r in seen] == [0, 1, 2, 3] and {r["world"] for r in seen} == {4}, out
    assert {r["host"] for r in seen} == {ADDRESS["node2"], ADDRESS["node3"]}
    assert {r["master"] for r in seen} == {ADDRESS["node2"]}  # the first active host
    assert wait_until_gone(run_id, 10) == []
