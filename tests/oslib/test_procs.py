"""A job's processes on this host, found from /proc by run id (dslaunch/oslib/procs.py): real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dslaunch.oslib import procs

pytestmark = pytest.mark.launch


def _sleeper(run_id: str, node_rank: int, *, daemon: bool = False) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DSLAUNCH_RUN_ID": run_id, "NODE_RANK": str(node_rank)}
    code = "import time; time.sleep(60)"
    if daemon:  # a grandchild that left its parent's session, as a rank's daemon would
        code = f"import os, subprocess, sys; os.setsid(); subprocess.Popen([sys.executable, '-c', {code!r}]); {code}"
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def _wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_job_pids_find_by_run_id_and_node_rank_and_kill_job_ends_them() -> None:
    run_id = f"procs{os.getpid()}"
    started = [_sleeper(run_id, 0), _sleeper(run_id, 1), _sleeper(f"other{os.getpid()}", 0)]
    try:
        _wait_for(lambda: len(procs.job_pids(run_id)) == 2)
        assert sorted(procs.job_pids(run_id)) == sorted(p.pid for p in started[:2])
        assert procs.job_pids(run_id, node_rank=1) == [started[1].pid]
        assert os.getpid() not in procs.job_pids(run_id)
        assert procs.kill_job(run_id, node_rank=0) == [started[0].pid]
        assert started[0].wait(10) == -9 and started[1].poll() is None
        assert procs.kill_job(run_id) == [started[1].pid]
        assert started[1].wait(10) == -9 and started[2].poll() is None
    finally:
        for p in started:
            p.kill()
            p.wait()


def test_descendants_include_a_daemon_in_a_session_of_its_own() -> None:
    parent = _sleeper(f"desc{os.getpid()}", 0, daemon=True)
    try:
        _wait_for(lambda: len(procs.descendants(parent.pid)) == 1)
        (child,) = procs.descendants(parent.pid)
        with open(f"/proc/{child}/stat", "rb") as f:
            assert int(f.read().rsplit(b")", 1)[1].split()[1]) == parent.pid  # its parent is ours
    finally:
        procs.kill_job(f"desc{os.getpid()}")
        parent.wait()
