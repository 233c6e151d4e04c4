"""One stop step for the whole job under real Open MPI and MPICH across two ssh hosts (sshd on loopback aliases):
mpirun carries nothing from the launcher to one agent, so each agent dials back to the launcher, which answers
every node with the largest proposal (runners/mpi.py, docs/stopping.md). SIGTERM goes to dslaunch, as a scheduler
sends it; mpirun passes it to every agent."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from dslaunch.agent.dialback_client import connect_back, dialback_text
from dslaunch.runners import mpi
from dslaunch.runners.remote.agent_links import AgentLinks
from testbeds.ssh_cluster import SshCluster
from tests.helpers import DSLAUNCH, wait_until_gone
from tests.runners.stop_steps import RANKS, finish, saved, start, wait_ready
from tests.runners.test_mpi import _need
from tests.runners.test_mpi_ssh import _port

pytestmark = [pytest.mark.launch, pytest.mark.cluster]
FLAVOURS = [mpi.OPENMPI, mpi.MPICH]


def _stop_two_hosts(
    cluster: SshCluster, flavour: mpi.Flavour, out: Path, exports: dict[str, str]
) -> tuple[dict[int, int], dict[int, int]]:
    """2 hosts x 2 ranks of tests/scripts/stop_step_ranks.py; SIGTERM to dslaunch once every rank is ready; the
    step each rank saved, and the step each had reached when the SIGTERM was sent. The job must exit 143 and leave
    nothing."""
    _need(flavour)
    hostfile = cluster.base / f"mpi-stop-{uuid.uuid4().hex[:6]}"
    hostfile.write_text("node1 slots=2\nnode2 slots=2\n")
    run_id = f"mpistep{uuid.uuid4().hex[:8]}"
    exported = [
        arg for name, value in {"OUT_DIR": str(out), **exports}.items() for arg in ("--export", f"{name}={value}")
    ]
    argv = ["-H", str(hostfile), "--ssh-config", str(cluster.config), "--launcher", flavour.name,
            "--master-port", str(_port()), "--run-id", run_id, "--stop-grace", "20", *exported, RANKS]  # fmt: skip
    proc = start(argv, out, {"CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"})
    try:
        wait_ready(out, range(4), proc)
        at_kill = {rank: _position(out, rank) for rank in range(4)}
        os.kill(proc.pid, signal.SIGTERM)
        code, _stdout, stderr = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    got = {rank: int(step) for rank, step in saved(out, range(4)).items()}
    assert sorted(got) == [0, 1, 2, 3], (got, stderr)
    assert code == 143, stderr
    assert "decides" not in stderr and "a stop's step is this node's alone" not in stderr, stderr
    assert wait_until_gone(run_id, 15) == []
    return got, at_kill


def _position(out: Path, rank: int) -> int:
    """The last step the rank finished (its ``pos.RANK`` file), 0 before the first."""
    try:
        return int((out / f"pos.{rank}").read_text() or 0)
    except (OSError, ValueError):
        return 0


@pytest.mark.parametrize("flavour", FLAVOURS, ids=lambda f: f.name)
def test_sigterm_to_the_launcher_stops_both_hosts_ranks_at_one_step(
    ssh_cluster: SshCluster, flavour: mpi.Flavour, tmp_path: Path
) -> None:
    """The ranks of both hosts keep a barrier of files every step, as an allreduce would: nodes one step apart
    would leave one node's ranks in it until the grace ended, killed without a save."""
    got, _at_kill = _stop_two_hosts(ssh_cluster, flavour, tmp_path, {"STEP_TIME": "0.05"})
    assert len(set(got.values())) == 1, got


@pytest.mark.parametrize("flavour", FLAVOURS, ids=lambda f: f.name)
def test_a_host_far_behind_runs_on_to_the_step_of_the_host_ahead(
    ssh_cluster: SshCluster, flavour: mpi.Flavour, tmp_path: Path
) -> None:
    """No barrier: node 0's ranks take 0.12 s a step, node 1's 0.02 s. Each node alone (as before the dial-back)
    stops dozens of steps apart from the other; the launcher answers both with node 1's, and node 0's ranks run on
    to it."""
    apart = {"NO_BARRIER": "1", "DELAY_RANKS": "0,1", "RANK_DELAY": "0.1", "STEP_TIME": "0.02", "READY_AFTER": "5"}
    got, at_kill = _stop_two_hosts(ssh_cluster, flavour, tmp_path, apart)
    assert len(set(got.values())) == 1, got
    behind, ahead = max(at_kill[0], at_kill[1]), min(at_kill[2], at_kill[3])
    assert ahead > behind + 3, f"node 1 was not ahead when the stop came: {at_kill}"  # the setup, not dslaunch
    assert got[0] > ahead, (got, at_kill)  # node 1's step: node 0's ranks ran on past where node 1 stood


def test_no_dial_back_means_each_node_decides_alone_and_the_job_still_stops(tmp_path: Path) -> None:
    """An agent whose dial-back cannot connect (here: a host name that does not resolve) says so once and decides its
    node's step alone: its ranks still save at once, not at the grace's end."""
    _need(mpi.OPENMPI)
    run_id = f"mpistep{uuid.uuid4().hex[:8]}"
    argv = ["--launcher", "openmpi", "--nproc-per-node", "2", "--run-id", run_id, "--stop-grace", "30", RANKS]
    proc = start(argv, tmp_path, {"DSLAUNCH_DIAL_ADDR": "dslaunch-no-such-host.invalid", "CUDA_VISIBLE_DEVICES": ""})
    try:
        wait_ready(tmp_path, range(2), proc)
        asked = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        code, _stdout, stderr = finish(proc)
        took = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    got = saved(tmp_path, range(2))
    assert sorted(got) == [0, 1] and len(set(got.values())) == 1, (got, stderr)
    assert "a stop's step is this node's alone" in stderr, stderr
    assert code == 143 and took < 15, (code, took, stderr)  # the 30 s grace did not run out
    assert wait_until_gone(run_id, 15) == []


def test_the_answer_reaches_an_agent_that_dials_back_late() -> None:
    """The step is decided before an agent's connection is up (a stop in the first instant): it gets it once it is;
    the one already connected gets it at once."""
    secret = secrets.token_bytes(32)
    listener = AgentLinks("r1", secret)
    try:
        line = dialback_text(listener.port, secret, "mpi")
        env = {"DSLAUNCH_DIAL_ADDR": "127.0.0.1"}
        early, _host = connect_back(line, "r1", env, 5.0, name="mpi-node-0", node_rank=0)
        mpi.AgentLines(listener, 2).send(b"stop-at 7\n")
        time.sleep(0.3)
        late, _host = connect_back(line, "r1", env, 5.0, name="mpi-node-1", node_rank=1)
        for link in (early, late):
            assert next(link.lines()) == "stop-at 7\n"  # MACed by the launcher, checked by the agent's side
            link.close()
    finally:
        listener.close()


def test_a_dry_run_says_the_agents_dial_back() -> None:
    result = subprocess.run(
        [*DSLAUNCH, "--dry-run", "--launcher", "openmpi", "--master-port", "29555", RANKS],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert "-x DSLAUNCH_MPI_DIAL" in result.stdout, result.stdout
