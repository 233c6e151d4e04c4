"""A requested stop over ssh and pdsh, on the loopback test bed (2 hosts, 2 ranks each): SIGTERM to dslaunch
reaches each remote rank's main process only, so ranks with DataLoader-like workers and their own SIGTERM handler
save (docs/stopping.md). With --max-restarts the agents live for the job (another control path) and the stop is
never restarted."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS, alive, wait_for_file, wait_until_gone
from tests.runners.remote.launch import RUNNERS, base_args, start

pytestmark = [pytest.mark.launch, pytest.mark.cluster]
SAVER = str(SCRIPTS / "stop_saver.py")


def _ready(folder: Path) -> list[int]:
    assert all(wait_for_file(str(folder / f"rank{r}.ready"), 40) for r in range(4)), "ranks did not start"
    return [int(p) for r in range(4) for p in (folder / f"rank{r}.ready").read_text().split()]


@pytest.mark.parametrize("restarts", ["0", "2"])
@pytest.mark.parametrize("runner", RUNNERS)
def test_sigterm_every_remote_rank_saves_and_the_job_exits_143(
    ssh_cluster: SshCluster, runner: str, restarts: str, tmp_path: Path
) -> None:
    run_id = f"stop{runner}{uuid.uuid4().hex[:6]}"
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--stop-grace", "15"]
    proc = start([*args, "--max-restarts", restarts, SAVER, str(tmp_path)], cwd=tmp_path)
    try:
        pids = _ready(tmp_path)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert [(tmp_path / f"rank{r}.saved").exists() for r in range(4)] == [True] * 4, err
    assert proc.returncode == 143, err
    assert "dslaunch: stopped by SIGTERM (exit 143); 4 of 4 ranks exited 0 within" in err, err
    assert "restarting" not in err
    assert wait_until_gone(run_id, 5) == []
    assert not [p for p in pids if alive(p)]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_remote_rank_ignoring_the_stop_is_ended_after_the_grace_and_a_second_sigterm_ends_it_sooner(
    ssh_cluster: SshCluster, runner: str, tmp_path: Path
) -> None:
    run_id = f"stopign{runner}{uuid.uuid4().hex[:6]}"
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--stop-grace", "60"]
    proc = start([*args, "--export", "IGNORE_STOP", SAVER, str(tmp_path)], cwd=tmp_path, env={"IGNORE_STOP": "1"})
    try:
        pids = _ready(tmp_path)
        proc.send_signal(signal.SIGTERM)
        time.sleep(1.0)
        assert all(alive(p) for p in pids), "a rank or worker was ended before the grace's end"
        second = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # the grace (60 s) ends now: groups SIGTERM, SIGKILL 2 s later
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    assert time.monotonic() - second < 12, err
    assert wait_until_gone(run_id, 5) == []
    assert not [p for p in pids if alive(p)]
