"""An ssh job agent, on its own paramiko channel: it runs while its channel is open, and ending
its connection from the launcher's side ends it there (real sshd on loopback)."""

from __future__ import annotations

import contextlib
import sys
import time
import uuid

import psutil
import pytest

from dslaunch.job.result import START_FAILED
from dslaunch.output.lanes import ErrLane
from dslaunch.runners.remote.agent_command import agent_command
from dslaunch.runners.ssh.channel_agent import SshJobAgent
from dslaunch.runners.ssh.paramiko_conn import connect
from testbeds.ssh_cluster import SshCluster
from tests.helpers import job_processes, until
from tests.plans import make_plan

pytestmark = [pytest.mark.launch, pytest.mark.cluster]


def _agents(run_id: str) -> list[int]:
    found = []
    for proc in job_processes(run_id):
        with contextlib.suppress(psutil.Error):  # one that ended since it was listed
            if "--for-job" in proc.cmdline():
                found.append(proc.pid)
    return found


@pytest.mark.parametrize("how", ["abort", "close"])
def test_an_agent_runs_while_its_channel_is_open_and_ends_with_it(ssh_cluster: SshCluster, how: str) -> None:
    run_id = "sshchan-" + uuid.uuid4().hex[:8]
    plan = make_plan(hosts=("node1",), run_id=run_id, python=sys.executable)
    conn = connect("node1", str(ssh_cluster.config), None, False, 10)
    agent = SshJobAgent("node1", conn, agent_command(plan, 0, for_job=True, host="node1"), ErrLane())
    try:
        assert until(lambda: len(_agents(run_id)) == 1, 20), "the agent did not start"
        time.sleep(0.5)
        assert agent.status() is None and agent.usable()  # waiting for its first attempt
        if how == "abort":
            agent.abort()
            assert agent.status() == START_FAILED and not agent.usable()
        else:
            agent.close()  # EOF on its stdin: it exits, status 0 (no attempt ran)
            assert agent.status() == 0
        assert until(lambda: _agents(run_id) == [], 20), "the agent outlived its connection"
    finally:
        conn.close()
