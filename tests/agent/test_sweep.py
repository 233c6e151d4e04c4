"""A local node agent that dies (SIGKILL, the OOM killer) takes its ranks with it (parent-death signal), but not what
they double-forked: the launcher sweeps this machine for the job's processes, as the remote reaper does (issue 22,
item 2). A remote agent whose launcher is SIGKILLed sweeps its node itself, whatever signal comes meanwhile (issue 55).
docs/teardown.md."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import DSLAUNCH, SCRIPTS, job_processes, wait_until_gone
from tests.runners.remote.launch import RUNNERS, base_args, start, stop, wait_ready

SCRIPT = str(SCRIPTS / "daemonize.py")
JOB = str(SCRIPTS / "job.py")


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


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("storm", [False, True], ids=["plain", "sighup-storm"])
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_sigkilled_remote_launcher_leaves_no_daemon(
    ssh_cluster: SshCluster, runner: str, storm: bool, tmp_path: Path
) -> None:
    """2 hosts x 2 ranks over ssh or pdsh, one attempt; each rank double-forks a setsid daemon (`sleep 301`, the run id
    in its environment); then SIGKILL to the launcher: 10 s later nothing of the job is alive (issue 55). The news of
    the lost launcher comes twice over ssh (the channel's EOF, then sshd's exit: the parent-death SIGTERM) and under
    pdsh (the EOF, then the dial-back's SIGHUP); a stop signal taken by default during the sweep left the daemons.
    ``sighup-storm`` makes that window certain: SIGHUP to every agent each millisecond from the kill on."""
    run_id = f"sweep{runner}{storm:d}{uuid.uuid4().hex[:8]}"
    agents: list[int] = []
    launcher = start(
        [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, JOB, "detach", str(tmp_path)],
        cwd=tmp_path,
    )
    try:
        assert wait_ready(tmp_path, 4, timeout=120)  # start-up is not what is tested: slow under a heavy load
        daemons = [p for p in job_processes(run_id) if p.cmdline() == ["sleep", "301"]]
        agents = [os.pidfd_open(p.pid) for p in job_processes(run_id) if _is_agent(p.cmdline())]
        assert len(daemons) == 4 and len(agents) == 2, (daemons, agents)
        launcher.send_signal(signal.SIGKILL)
        if storm:
            _sighup_until_gone(agents, 5.0)
    finally:
        stop(launcher)
        for fd in agents:
            os.close(fd)
    assert launcher.returncode == -signal.SIGKILL
    left = wait_until_gone(run_id, 10)
    assert not left, [(p.pid, p.cmdline()) for p in left]


def _is_agent(argv: list[str]) -> bool:
    """A node agent's command line: not pdsh's or ssh's, which carry it as their remote command."""
    return bool(argv) and os.path.basename(argv[0]).startswith("python") and "dslaunch.agent" in argv


def _sighup_until_gone(pidfds: list[int], within: float) -> None:
    """SIGHUP each millisecond to each process (by pidfd: never to a pid reused meanwhile) until it has ended."""
    deadline, left = time.monotonic() + within, list(pidfds)
    while left and time.monotonic() < deadline:
        for fd in list(left):
            try:
                signal.pidfd_send_signal(fd, signal.SIGHUP)
            except ProcessLookupError:
                left.remove(fd)
        time.sleep(0.001)
