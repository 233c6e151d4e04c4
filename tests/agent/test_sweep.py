"""A local node agent that dies (SIGKILL, the OOM killer) takes its ranks with it (parent-death signal), but not what
they double-forked: the launcher sweeps this machine for the job's processes, as the remote reaper does (issue 22,
item 2; docs/teardown.md)."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import psutil
import pytest

from tests.helpers import DSLAUNCH, SCRIPTS, job_processes, wait_until_gone

SCRIPT = str(SCRIPTS / "daemonize.py")


@pytest.mark.launch
def test_a_sigkilled_local_agent_leaves_nothing_of_the_job() -> None:
    run_id = "t" + uuid.uuid4().hex[:10]
    argv = [*DSLAUNCH, "--nproc-per-node", "2", "--run-id", run_id, SCRIPT]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert launcher.stdout is not None
        started = sorted(launcher.stdout.readline().strip() for _ in range(2))
        assert started == ["[rank0]: daemon started by rank 0", "[rank1]: daemon started by rank 1"]
        (agent,) = psutil.Process(launcher.pid).children()  # the forked node agent
        ranks_and_daemons = [p for p in job_processes(run_id) if p.pid not in (launcher.pid, agent.pid)]
        assert len(ranks_and_daemons) == 4
        os.kill(agent.pid, signal.SIGKILL)
        _, err = launcher.communicate(timeout=30)
    finally:
        launcher.kill()
        launcher.wait()
    assert launcher.returncode == 128 + signal.SIGKILL, err
    assert "node 0 (localhost) disappeared" in err
    left = wait_until_gone(run_id, 2.0)
    assert not left, [p.cmdline() for p in left]
