"""The pdsh runner's shared connections (runners/pdsh/ssh_mux.py): one master per host, ended with the job."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from dslaunch.runners.pdsh.ssh_mux import SshMux, processes_naming
from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS
from tests.runners.remote.launch import base_args, run

pytestmark = [pytest.mark.launch]

OK_SCRIPT = str(SCRIPTS / "job.py")


def test_close_ends_what_names_its_folder_and_removes_it() -> None:
    mux = SshMux()
    assert len(f"{mux.dir}/{'0' * 40}") < 104  # a unix socket's path
    # `read` is a builtin: this shell never forks a child that would still carry its command line
    naming = subprocess.Popen(["sh", "-c", "read x", "sh", f"ControlPath={mux.dir}/%C"], stdin=subprocess.PIPE)
    inside = subprocess.Popen(["sleep", "60"], cwd=mux.dir)  # runs there, names it nowhere
    try:
        assert processes_naming(mux.dir) == [naming.pid]
        mux.close()
        assert naming.wait(10) != 0
        assert not os.path.exists(mux.dir)
        assert inside.poll() is None
    finally:
        for proc in (naming, inside):
            proc.kill()
            proc.wait()


def _leaked_masters() -> list[str]:
    """ssh masters whose socket folder is gone: their runner closed without ending them."""
    leaked = []
    for pid in processes_naming("/tmp/dsl-mux-"):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        folder = next((m[1] for w in words if (m := re.match(r"ControlPath=(/tmp/dsl-mux-[^/]+)/", w))), None)
        if words and os.path.basename(words[0]) == "ssh" and folder and not os.path.isdir(folder):
            leaked.append(" ".join(words))
    return leaked


@pytest.mark.cluster
@pytest.mark.parametrize("code", [0, 3])
def test_a_pdsh_job_shares_one_connection_a_host_and_ends_it(
    code: int, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    args = base_args(ssh_cluster, "pdsh", ["node1", "node2"], slots=2)
    job = ["fail", str(tmp_path), "3", str(code)] if code else ["echo"]
    before = _connections(ssh_cluster)
    done = run([*args, OK_SCRIPT, *job], cwd=tmp_path)
    assert done.returncode == code, done.stderr
    assert "ssh exited with exit code 143" not in done.stderr  # the ends of stopped nodes are no news
    assert _leaked_masters() == []
    # the port probe, staging, pdsh's sessions, the stops and the reaper: one connection a host
    assert _connections(ssh_cluster) - before == 2


def _connections(cluster: SshCluster) -> int:
    """Connections the test bed's sshd accepted so far (this worker's own bed: its tests run one at a time)."""
    return sum(p.read_text().count("Accepted publickey") for p in cluster.base.glob("sshd*.log"))
