"""A node cut off from the network mid-job (network namespaces): the launcher names it within about
--ssh-connect-timeout and stops the other nodes. The cut-off node's agent finds out on its own, within its bound
and before the link is back (the testbed's sshd has no ClientAlive setting that would end the session for it):
over ssh it hears no heartbeat; under pdsh its connection back to the launcher goes silent."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from testbeds.netns_cluster import NetnsCluster
from tests.runners.remote.launch import SCRIPT, start, wait_ready, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]


def _link(cluster: NetnsCluster, node: int, state: str) -> None:
    subprocess.run(["ip", "link", "set", f"{cluster.tag}h{node}", state], check=True, timeout=10)


@pytest.mark.parametrize(("runner", "restarts"), [("ssh", 0), ("pdsh", 0), ("ssh", 1)])
def test_a_partitioned_node_is_named_and_the_job_ends(
    netns_cluster: NetnsCluster, runner: str, restarts: int, tmp_path: Path
) -> None:
    """With ``restarts``, they are job agents: the restart cannot reach the cut-off node either (255), and
    that node's agent, waiting for an attempt or in one, ends by its heartbeats' silence all the same."""
    if runner == "pdsh":
        from testbeds.ssh_cluster import need

        need("pdsh")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=1\nnode2 slots=1\n")
    run_id = f"cut{runner}{restarts}{os.getpid()}"
    args = ["--hostfile", str(hostfile), "--launcher", runner, "--ssh-config", str(netns_cluster.config)]
    args += ["--ssh-connect-timeout", "3", "--shutdown-timeout", "2", "--run-id", run_id, "--master-port", "29400"]
    args += ["--max-restarts", str(restarts), "--restart-delay", "0"]
    proc = start([*args, SCRIPT, "sleep", str(tmp_path)], cwd=tmp_path)
    try:
        assert wait_ready(tmp_path, 2), "ranks did not start"
        _link(netns_cluster, 1, "down")
        cut_at = time.monotonic()
        _out, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - cut_at
        left = wait_until_gone(run_id, 3 + 2 + 2 + 5 - (time.monotonic() - cut_at))
    finally:
        _link(netns_cluster, 1, "up")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 255, err
    assert "node 1 (node2) disappeared" in err, err
    retry = 3 if restarts else 0  # the restart tries the cut-off node once more: one more --ssh-connect-timeout
    assert elapsed < 3 + 8 + retry, f"the partition was noticed after {elapsed:.1f} s"
    assert left == [], "the cut-off agent outlived its bound (wire.silence_bound or channel/link.SILENT, + the grace)"
    assert wait_until_gone(run_id, 15) == []
