"""How the ssh runner uses paramiko: without invoke (unless ssh_config's ``Match exec`` needs it), AES-GCM first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster

pytestmark = [pytest.mark.launch]

PROBE = """
import sys
from dslaunch.runners.ssh import paramiko_conn
from dslaunch.runners.remote.sshconfig import resolve
print("invoke" in sys.modules)
for host in sys.argv[2:]:
    print(host, resolve(host, sys.argv[1]).port)
print("invoke" in sys.modules)
"""


def _probe(config: Path, *hosts: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(config), *hosts], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.split("\n")[:-1]


def test_paramiko_comes_without_invoke(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host *\n    Port 2200\n")
    assert _probe(config, "a") == ["False", "a 2200", "False"]


def test_match_exec_still_runs(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text('Match host yes exec "true"\n    Port 2201\nMatch host no exec "false"\n    Port 2202\n')
    assert _probe(config, "yes", "no") == ["False", "yes 2201", "no 22", "True"]


@pytest.mark.cluster
def test_aes_gcm_is_what_openssh_and_the_launcher_agree_on(ssh_cluster: SshCluster) -> None:
    from dslaunch.runners.ssh.paramiko_conn import connect

    conn = connect("node1", str(ssh_cluster.config), None, False, 10)
    try:
        transport = conn.client.get_transport()
        assert transport is not None
        assert (transport.local_cipher, transport.remote_cipher) == ("aes128-gcm@openssh.com",) * 2
    finally:
        conn.close()
