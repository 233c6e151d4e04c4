"""pdsh's staged plan files (``~/.cache/dslaunch/plans/<run id>.<node>.plan``, 0600, the job's secrets) are gone
after every exit path (issue 22, item 5): a host whose agent cannot start (so neither can the python reaper there),
and a launcher SIGKILLed right after staging, whose files the next pdsh run sweeps once they are old.

Every test "host" is this machine, so they share one home: the checks look only at this test's own run ids.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dslaunch.runners.remote import stage
from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS, wait_for_file
from tests.runners.remote.launch import base_args, run, start, stop, wait_ready, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

PLANS = Path.home() / stage.PLAN_DIR
OK_SCRIPT = str(SCRIPTS / "job.py")


def _python(tmp_path: Path, body: str) -> str:
    """A --remote-python stand-in: ``body`` (sh) decides, then the real interpreter runs."""
    path = tmp_path / "python"
    path.write_text(f'#!/bin/sh\n{body}\nexec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return str(path)


def _staged(run_id: str) -> list[str]:
    return sorted(p.name for p in PLANS.glob(f"{run_id}.*.plan")) if PLANS.is_dir() else []


def test_a_host_whose_agent_cannot_start_keeps_no_plan(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """node2's python is broken (so is the python reaper there): its plan file must still go."""
    run_id = f"t{uuid.uuid4().hex[:10]}"
    python = _python(tmp_path, 'case "$SSH_CONNECTION" in *" 127.0.0.3 "*) echo "no python here" >&2; exit 127;; esac')
    args = [*base_args(ssh_cluster, "pdsh", ["node1", "node2"], slots=1), "--run-id", run_id]
    result = run([*args, "--remote-python", python, OK_SCRIPT, "sleep", str(tmp_path)], cwd=tmp_path)
    assert result.returncode != 0, result.stderr
    assert "node2" in result.stderr
    assert _staged(run_id) == []
    assert wait_until_gone(run_id, 10) == []


def test_plans_of_a_launcher_killed_after_staging_are_swept_by_the_next_run(
    ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """SIGKILL right after staging, while no agent has read its plan yet (each python takes 3 s to start and
    then fails): the files stay; the next pdsh run on those hosts removes them once they are old enough that
    no agent can still be on its way to them, and leaves a young one (another job starting) alone."""
    run_id = f"t{uuid.uuid4().hex[:10]}"
    slow = _python(tmp_path, "sleep 3; exit 1")
    args = [*base_args(ssh_cluster, "pdsh", ["node1", "node2"], slots=1), "--run-id", run_id]
    proc = start([*args, "--remote-python", slow, OK_SCRIPT, "sleep", str(tmp_path)], cwd=tmp_path)
    deadline = time.monotonic() + 30
    while len(_staged(run_id)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert wait_until_gone(run_id, 15) == []
    left = _staged(run_id)
    assert left == [f"{run_id}.0.plan", f"{run_id}.1.plan"]  # nobody came for them

    old = time.time() - stage.STALE_AFTER - 60
    for name in left:
        os.utime(PLANS / name, (old, old))
    young_id = f"t{uuid.uuid4().hex[:10]}"
    young = PLANS / f"{young_id}.0.plan"
    young.write_text("x\n")
    young.chmod(0o600)
    try:
        args = base_args(ssh_cluster, "pdsh", ["node1", "node2"], slots=1)
        result = run([*args, OK_SCRIPT, "echo"], cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert _staged(run_id) == []
        assert young.exists()
    finally:
        young.unlink(missing_ok=True)


def _sleeper(tmp_path: Path, run_id: str) -> tuple[subprocess.Popen[bytes], Path]:
    """A process of run ``run_id`` and a pid file naming it, in a home of its own (``tmp_path``)."""
    proc = subprocess.Popen(["sleep", "60"], env={**os.environ, "DSLAUNCH_RUN_ID": run_id})
    pid_file = tmp_path / stage.pid_path(run_id, 3)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(f"{proc.pid}\n")
    return proc, pid_file


def _signal(tmp_path: Path, run_id: str, name: str) -> subprocess.CompletedProcess[str]:
    command = stage.signal_command(run_id, 3, name)
    env = {**os.environ, "HOME": str(tmp_path)}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)


def test_the_shell_signal_reaches_the_runs_process_and_nothing_else(tmp_path: Path) -> None:
    run_id = f"t{uuid.uuid4().hex[:10]}"
    proc, pid_file = _sleeper(tmp_path, run_id)
    try:
        other = f"{run_id}x"
        (tmp_path / stage.pid_path(other, 3)).write_text(f"{proc.pid}\n")  # names a process of another run
        assert _signal(tmp_path, other, "TERM").returncode != 0
        assert _signal(tmp_path, f"{run_id}y", "TERM").returncode != 0  # no pid file
        assert proc.poll() is None
        done = _signal(tmp_path, run_id, "TERM")
        assert (done.returncode, done.stdout) == (0, "signalled\n"), done.stderr
        assert proc.wait(10) == -signal.SIGTERM
        assert _signal(tmp_path, run_id, "TERM").returncode != 0  # the process is gone: a stale pid file
        pid_file.write_text("1; touch pwned\n")
        assert _signal(tmp_path, run_id, "TERM").returncode != 0 and not (tmp_path / "pwned").exists()
    finally:
        proc.kill()
        proc.wait()


def test_pdsh_agents_keep_a_pid_file_while_they_run_and_are_signalled_by_it(
    ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """The launcher's SIGUSR1 and its stop reach each pdsh agent through the pid it wrote beside its plan; the
    files go with the agents."""
    run_id = f"t{uuid.uuid4().hex[:10]}"
    args = [*base_args(ssh_cluster, "pdsh", ["node1", "node2"], slots=1), "--run-id", run_id]
    proc = start([*args, OK_SCRIPT, "usr1", str(tmp_path)], cwd=tmp_path)
    try:
        assert wait_ready(tmp_path, 2), proc.stderr
        for node in (0, 1):
            pid = int((PLANS / f"{run_id}.{node}.pid").read_text())
            assert b"dslaunch.agent" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        proc.send_signal(signal.SIGUSR1)
        assert all(wait_for_file(str(tmp_path / f"usr1.{r}"), 10) for r in (0, 1))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == 143, err
    assert sorted(PLANS.glob(f"{run_id}.*")) == []
    assert wait_until_gone(run_id, 10) == []
