"""Job agents over ssh and pdsh (``--max-restarts``): a restart is a message to the host's
agent (on its channel, or on the connection it dialled back), which forks the next attempt's ranks from the zygote
it kept (real sshd and pdsh on loopback)."""

from __future__ import annotations

import contextlib
import re
import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS, job_processes
from tests.runners.remote.launch import RUNNERS, base_args, start, wait_ready, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

WARM_JOB = str(SCRIPTS / "warm" / "warm_job.py")
SEEN = re.compile(r"attempt=(\d) rank=(\d) zygote=(\S+)")


def _agents(run_id: str) -> set[int]:
    found = set()
    for proc in job_processes(run_id):
        with contextlib.suppress(psutil.Error):
            if "--for-job" in proc.cmdline():
                found.add(proc.pid)
    return found


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_restart_forks_from_each_hosts_kept_zygote(ssh_cluster: SshCluster, tmp_path: Path, runner: str) -> None:
    run_id = runner + "warm-" + uuid.uuid4().hex[:8]
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--master-port", "0",
            "--preload", "json", "--max-restarts", "2", "--restart-delay", "0", WARM_JOB]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    deadline = time.monotonic() + 30
    agents: set[int] = set()
    while len(agents) < 2 and time.monotonic() < deadline and proc.poll() is None:
        agents = _agents(run_id)
        time.sleep(0.05)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    seen = {(int(m[1]), int(m[2])): m[3] for m in SEEN.finditer(out)}
    assert {(1, r) for r in range(4)} | {(0, 1)} <= set(seen), out  # rank 1 fails once it has printed
    for node in (0, 1):  # one zygote per host served both attempts: the agent and its zygote stayed
        zygotes = {z for (_a, r), z in seen.items() if r // 2 == node}
        assert len(zygotes) == 1 and "-" not in zygotes, seen
    assert len({a for a, r in seen if r // 2 == 0}) == 2, seen
    assert len(agents) == 2, "each host's agent was not found while the job ran"
    assert "attempt 1 of 3 failed" in err and "the job ran 2 times (--max-restarts 2)" in err, err
    assert "Traceback" not in err
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_agents_survive_attempts_and_end_with_the_job(ssh_cluster: SshCluster, tmp_path: Path, runner: str) -> None:
    """Without --preload: the same agent process on each host runs every attempt; after the job none is left."""
    run_id = runner + "live-" + uuid.uuid4().hex[:8]
    flaky = str(SCRIPTS / "flaky.py")
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--max-restarts", "3",
            "--restart-delay", "0.5", flaky, str(tmp_path), "3", "2", "5", "1", "60"]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    seen: dict[int, set[int]] = {}
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        lines = (tmp_path / "attempts.txt").read_text().splitlines() if (tmp_path / "attempts.txt").exists() else []
        attempt = max((int(line.split()[0]) for line in lines), default=-1)
        if attempt >= 0:
            seen.setdefault(attempt, set()).update(_agents(run_id))
        time.sleep(0.05)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert sorted(seen) == [0, 1, 2], seen
    assert len(seen[0]) == 2 and seen[0] == seen[1] == seen[2], seen
    assert err.count("rank 3 (local_rank 1, node 1) on host node2 exited with code 5") == 2, err
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_a_stopped_launcher_between_attempts_leaves_nothing(
    ssh_cluster: SshCluster, tmp_path: Path, how: str, runner: str
) -> None:
    """Stopped while it waits to restart: the launcher ends its agents (SIGINT), or their channels' EOF does."""
    run_id = runner + "gap-" + uuid.uuid4().hex[:8]
    flaky = str(SCRIPTS / "flaky.py")
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--max-restarts", "3",
            "--preload", "json", "--restart-delay", "30", flaky, str(tmp_path), "0", "9", "4"]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and not (tmp_path / "attempts.txt").exists():
        time.sleep(0.05)
    time.sleep(3)  # the attempt has ended: the launcher waits out --restart-delay, its agents wait for it
    assert len(_agents(run_id)) == 2
    proc.send_signal(getattr(signal, how))
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == (130 if how == "SIGINT" else -9), err
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_launcher_killed_during_an_attempt_leaves_nothing(
    ssh_cluster: SshCluster, tmp_path: Path, runner: str
) -> None:
    """SIGKILL while the ranks run: each agent's control channel closes (its ssh session; the connection it dialled
    back), so it stops its ranks, ends its zygote and exits."""
    run_id = runner + "kill-" + uuid.uuid4().hex[:8]
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--max-restarts", "2",
            "--preload", "json", str(SCRIPTS / "job.py"), "sleep", str(tmp_path)]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    try:
        assert wait_ready(tmp_path, 4), "ranks did not start"
        assert len(_agents(run_id)) == 2
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert wait_until_gone(run_id, 2 + 5) == []
