"""Spare hosts standing by over ssh and pdsh: a spare's agent and zygote start with the job, a lost node's place is
taken by the spare's warm zygote, and a spare that fails its check while it waits is dropped (real sshd and pdsh on
loopback)."""

from __future__ import annotations

import contextlib
import re
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS, alive, job_processes
from tests.runners.remote.launch import RUNNERS, base_args, start, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

WARM_JOB = str(SCRIPTS / "warm" / "warm_job.py")
UNTIL_FILE = str(SCRIPTS / "until_file.py")
SEEN = re.compile(r"attempt=(\d) rank=(\d) zygote=(\S+)")


def _with(run_id: str, word: str) -> list[psutil.Process]:
    found = []
    for proc in job_processes(run_id):
        with contextlib.suppress(psutil.Error):
            if word in " ".join(proc.cmdline()):
                found.append(proc)
    return found


def _agents(run_id: str) -> list[psutil.Process]:
    """The job's agents themselves (not the shell, ssh client or pdsh that name them on their command lines)."""
    found = []
    for proc in job_processes(run_id):
        with contextlib.suppress(psutil.Error):
            if "--for-job" in proc.cmdline():
                found.append(proc)
    return found


def _dialled(agent: psutil.Process) -> bool:
    with contextlib.suppress(psutil.Error):
        return any(c.status == psutil.CONN_ESTABLISHED for c in agent.net_connections(kind="tcp"))
    return False


def _wait_for(what: object, count: int, timeout: float = 30) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    found: list[psutil.Process] = []
    while time.monotonic() < deadline:
        found = what()  # type: ignore[operator]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    return found


def _zygotes(run_id: str) -> list[psutil.Process]:
    """Each agent's zygote (its forks, the waiters and ranks, share its command line)."""
    found = []
    for proc in _with(run_id, "preload.server"):
        with contextlib.suppress(psutil.Error, AttributeError):
            if "--for-job" in proc.parent().cmdline():
                found.append(proc)
    return found


def _agent_on(run_id: str, host: str) -> psutil.Process:
    """The job's agent on ``host``: each names its host in its environment (a forked rank's shows its zygote's)."""

    def named() -> list[psutil.Process]:
        found = []
        for agent in _agents(run_id):
            with contextlib.suppress(psutil.Error):
                if agent.environ().get("DSLAUNCH_HOST") == host:
                    found.append(agent)
        return found

    found = _wait_for(named, 1)
    assert found, [(a.pid, a.cmdline()) for a in _agents(run_id)]
    return found[0]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_lost_node_is_replaced_by_the_spares_warm_zygote(
    ssh_cluster: SshCluster, tmp_path: Path, runner: str
) -> None:
    run_id = runner + "spare-" + uuid.uuid4().hex[:8]
    args = [*base_args(ssh_cluster, runner, ["node1", "node2", "node3"]), "--num-nodes", "2", "--run-id", run_id,
            "--master-port", "0", "--preload", "json", "--max-restarts", "1", "--restart-delay", "0",
            "--export", "FAIL_RANK=none", "--export", "SLEEP=60", WARM_JOB]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    try:
        zygotes = _wait_for(lambda: _zygotes(run_id), 3)  # node1's, node2's and the spare's
        assert len(zygotes) == 3, [z.cmdline() for z in zygotes]
        forks = _wait_for(lambda: _with(run_id, "preload.server"), 3 + 2 * 4)  # + a waiter and a rank per rank
        assert len(forks) >= 11, [f.cmdline() for f in forks]
        _agent_on(run_id, "node1").kill()  # node1's agent: the node is lost
        out, err = proc.communicate(timeout=90)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "attempt 2 runs on node2, node3 (4 ranks)" in err, err
    seen = {(int(m[1]), int(m[2])): m[3] for m in SEEN.finditer(out)}
    assert {(1, r) for r in range(4)} <= set(seen), out
    ready = {str(z.pid) for z in zygotes}
    assert {seen[(1, r)] for r in range(4)} <= ready, (seen, ready)  # both nodes forked from zygotes started at 0
    assert seen[(1, 2)] == seen[(1, 3)] and seen[(1, 2)] not in {seen.get((0, r)) for r in range(4)}  # the spare's
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_spare_that_fails_its_check_while_it_waits_is_dropped(
    ssh_cluster: SshCluster, tmp_path: Path, runner: str
) -> None:
    run_id = runner + "unfit-" + uuid.uuid4().hex[:8]
    until = tmp_path / "go"
    args = [*base_args(ssh_cluster, runner, ["node1", "node2", "node3"]), "--num-nodes", "2", "--run-id", run_id,
            "--max-restarts", "1", "--spare-check-interval", "1", UNTIL_FILE, str(until)]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    try:
        agents = _wait_for(lambda: _agents(run_id), 3)
        assert len(agents) == 3
        if runner == "pdsh":  # a pdsh agent is a spare once it has dialled back
            assert _wait_for(lambda: [a for a in agents if _dialled(a)], 3) == agents
        _agent_on(run_id, "node3").kill()
        time.sleep(3)  # a check a second: it finds the spare's agent gone
        until.write_text("")
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert err.count("dslaunch: spare host node3 failed its check and is dropped: its agent is gone") == 1, err
    assert wait_until_gone(run_id, 10) == []


BROKEN_ON_NODE3 = """#!/bin/sh
# node3 (127.0.0.4) loses its python once FLAG exists, as a host whose shared filesystem went away
case " $SSH_CONNECTION " in *" 127.0.0.4 "*)
  if [ -e FLAG ]; then echo "PYTHON: cannot open: Stale file handle" >&2; exit 127; fi;;
esac
exec PYTHON "$@"
"""


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_spare_that_fails_its_probe_while_it_waits_is_dropped_with_the_reason(
    ssh_cluster: SshCluster, tmp_path: Path, runner: str
) -> None:
    """The --preflight probe itself fails on the spare (its agent still alive): dropped with the probe's reason,
    its agent ended, and the job goes on and ends 0."""
    run_id = runner + "probe-" + uuid.uuid4().hex[:8]
    until, flag, python = tmp_path / "go", tmp_path / "node3-broken", tmp_path / "python"
    python.write_text(BROKEN_ON_NODE3.replace("FLAG", str(flag)).replace("PYTHON", sys.executable))
    python.chmod(0o755)
    args = [*base_args(ssh_cluster, runner, ["node1", "node2", "node3"]), "--num-nodes", "2", "--run-id", run_id,
            "--remote-python", str(python), "--max-restarts", "1", "--spare-check-interval", "1",
            UNTIL_FILE, str(until)]  # fmt: skip
    proc = start(args, cwd=tmp_path)
    try:
        agents = _wait_for(lambda: _agents(run_id), 3)
        assert len(agents) == 3
        if runner == "pdsh":
            assert _wait_for(lambda: [a for a in agents if _dialled(a)], 3) == agents
        spare = _agent_on(run_id, "node3")
        flag.write_text("")
        # the next check (a second) fails, and the spare's agent is ended (its sshd may reap it later: a zombie)
        assert _wait_for(lambda: [] if alive(spare.pid) else [spare], 1, 15) == [spare]
        assert len(_agents(run_id)) == 2
        until.write_text("")
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    line = "dslaunch: spare host node3 failed its check and is dropped: not usable: "
    assert err.count(line + f"{sys.executable}: cannot open: Stale file handle\n") == 1, err
    assert wait_until_gone(run_id, 10) == []
