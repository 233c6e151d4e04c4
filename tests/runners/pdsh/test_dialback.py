"""pdsh job agents dial back to their launcher: only the job's own get in, and one cut off from
its launcher ends its ranks and itself on its own (real sshd and pdsh, on loopback and in network namespaces)."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.channel import handshake
from dslaunch.channel.line_reader import read_handshake_line
from dslaunch.oslib.tcp import DEAD_AFTER
from dslaunch.runners.remote.dial_listener import DialBackListener
from testbeds.netns_cluster import NetnsCluster
from testbeds.ssh_cluster import need
from tests.helpers import job_processes
from tests.runners.remote.launch import SCRIPT, start, wait_ready


def _answer(port: int, secret: bytes, run_id: str, host: str) -> bytes | None:
    """Dial ``port`` as the agent of ``host`` with ``secret``: the welcome line, or None when refused."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        got = read_handshake_line(sock, handshake.MAX_LINE, time.monotonic() + 5)
        assert got is not None
        server_nonce = handshake.read_challenge(got[0])
        assert server_nonce is not None
        client_nonce = handshake.nonce()
        sock.sendall(handshake.answer(secret, run_id, (-1, host, -1), server_nonce, client_nonce))
        got = read_handshake_line(sock, handshake.MAX_LINE, time.monotonic() + 5)
        if got is None:
            return None
        assert handshake.check_welcome(secret, run_id, server_nonce, client_nonce, got[0])
        return got[0]


def test_only_an_agent_that_holds_the_jobs_secret_takes_its_hosts_place() -> None:
    secret = os.urandom(32)
    listener = DialBackListener("r1", secret)
    try:
        assert _answer(listener.port, os.urandom(32), "r1", "node1") is None  # another secret
        assert _answer(listener.port, secret, "r2", "node1") is None  # another job's
        silent = [socket.create_connection(("127.0.0.1", listener.port)) for _ in range(20)]  # never answer
        deadline = time.monotonic() + 0.5
        assert listener.take(["node1"], deadline, lambda _h: False) == {}
        welcomed: list[bytes | None] = []
        dialling = threading.Thread(target=lambda: welcomed.append(_answer(listener.port, secret, "r1", "node1")))
        dialling.start()
        taken = listener.take(["node1"], time.monotonic() + 10, lambda _h: False)
        dialling.join()
        assert list(taken) == ["node1"] and welcomed and welcomed[0] is not None
        for sock in [*taken.values(), *silent]:
            sock.close()
    finally:
        listener.close()


@pytest.mark.launch
@pytest.mark.cluster
def test_an_agent_cut_off_from_its_launcher_ends_its_ranks_within_the_bound(
    netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    """The launcher of a job agent sees the node lost; the agent, still cut off, sees its connection go
    silent and stops its ranks and itself within ``DEAD_AFTER`` plus the shutdown grace: before the link is back."""
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
        while time.monotonic() - cut_at < DEAD_AFTER + 2 + 5:
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
