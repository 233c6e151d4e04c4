"""pdsh job agents dial back to their launcher: one cut off from its launcher ends its ranks and itself on its own
(real sshd and pdsh, in network namespaces). Who gets in, and the MACs on every line after: tests/runners/remote/
test_agent_links.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.channel.link import SILENT
from testbeds.netns_cluster import NetnsCluster
from testbeds.ssh_cluster import need
from tests.helpers import job_processes
from tests.runners.remote.launch import SCRIPT, start, wait_ready


@pytest.mark.launch
@pytest.mark.cluster
def test_an_agent_cut_off_from_its_launcher_ends_its_ranks_within_the_bound(
    netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """The launcher of a job agent sees the node lost; the agent, still cut off, sees its connection go
    silent (no heartbeat for ``channel/link.SILENT``) and stops its ranks and itself within that plus the shutdown
    grace: before the link is back."""
    need("pdsh")
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=1\nnode2 slots=1\n")
    run_id = f"cutlive{os.getpid()}"
    args = ["--hostfile", str(hostfile), "--launcher", "pdsh", "--ssh-config", str(netns_cluster.config)]
    args += ["--ssh-connect-timeout", "3", "--shutdown-timeout", "2", "--run-id", run_id, "--master-port", "29400"]
    args += ["--max-restarts", "1", "--restart-delay", "0"]
    proc = start([*args, SCRIPT, "sleep", str(tmp_path)], cwd=tmp_path)
    link = f"{netns_cluster.tag}h1"
    try:
        assert wait_ready(tmp_path, 2), "ranks did not start"
        subprocess.run(["ip", "link", "set", link, "down"], check=True, timeout=10)
        cut_at = time.monotonic()
        _out, err = proc.communicate(timeout=90)
        left: list[str] = []
        while time.monotonic() - cut_at < SILENT + 2 + 5:
            left = [str(p.pid) for p in job_processes(run_id)]
            if not left:
                break
            time.sleep(0.2)
        gone_after = time.monotonic() - cut_at
    finally:
        subprocess.run(["ip", "link", "set", link, "up"], check=True, timeout=10)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "node 1 (node2) disappeared" in err, err
    assert proc.returncode == 255, err  # the restart cannot reach node2 either
    assert left == [], f"still there {gone_after:.1f} s after the cut, link still down: {left}"
    assert wire.ATTEMPT_END not in err
