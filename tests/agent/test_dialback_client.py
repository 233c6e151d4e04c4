"""A pdsh agent's way back to its launcher: where it dials, what it makes of a bad dial-back file or of a port that
is not a launcher, and a one-attempt agent's liveness line (real sockets, and agent-side processes)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.agent import dialback_client
from dslaunch.agent.dialback_client import ADDR_VAR, DialBackError, dial_back, launcher_address
from dslaunch.runners.remote.dial_listener import DialBackListener


@pytest.mark.parametrize(
    ("environ", "address"),
    [
        ({"SSH_CONNECTION": "10.0.0.7 51234 10.0.0.9 22"}, "10.0.0.7"),
        ({"SSH_CONNECTION": "fe80::1%eth0 51234 fe80::2%eth0 22"}, "fe80::1%eth0"),
        ({"SSH_CONNECTION": "10.0.0.7 51234 10.0.0.9 22", ADDR_VAR: "login1"}, "login1"),
        ({ADDR_VAR: " 192.168.1.1 "}, "192.168.1.1"),
    ],
)
def test_the_launcher_is_where_sshd_saw_it_come_from_unless_told(environ: dict[str, str], address: str) -> None:
    assert launcher_address(environ) == address


def test_without_ssh_connection_it_says_what_to_set() -> None:
    with pytest.raises(DialBackError, match=ADDR_VAR):
        launcher_address({})


def test_a_bad_dial_file_is_a_wire_error_and_is_deleted(tmp_path: Path) -> None:
    path = tmp_path / "x.plan"
    path.write_text("run 0 abc\n")
    with pytest.raises(wire.WireError):
        dial_back(str(path), "r1", {ADDR_VAR: "127.0.0.1"})
    assert not path.exists()


def test_a_port_that_is_not_a_launcher_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def junk() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    threading.Thread(target=junk, daemon=True).start()
    path = tmp_path / "x.plan"
    path.write_text(dialback_client.dialback_text(port, bytes(32), "node1"))
    try:
        with pytest.raises(DialBackError, match="did not answer as a dslaunch launcher"):
            dial_back(str(path), "r1", {ADDR_VAR: "127.0.0.1"})
    finally:
        server.close()
    assert not path.exists()


_WATCHER = """
import os, signal, sys, time
from dslaunch.agent.dialback_client import ADDR_VAR, watch_launcher
signal.signal(signal.SIGHUP, lambda *_: (print("hup", flush=True), os._exit(0)))
watch_launcher(sys.argv[1], sys.argv[2], {ADDR_VAR: "127.0.0.1"})
time.sleep(30)
os._exit(3)
"""


@pytest.mark.launch
def test_a_one_attempt_agent_is_told_when_its_line_to_the_launcher_ends() -> None:
    """The liveness line of a pdsh agent: once up, its end is SIGHUP to the agent (a stop signal)."""
    secret = os.urandom(32)
    listener = DialBackListener("r1", secret)
    text = dialback_client.dialback_text(listener.port, secret, "node1").strip()
    child = subprocess.Popen([sys.executable, "-c", _WATCHER, text, "r1"], stdout=subprocess.PIPE, text=True)
    try:
        taken = listener.take(["node1"], time.monotonic() + 15, lambda _h: False)
        assert list(taken) == ["node1"], "the agent's side did not dial back"
        assert child.poll() is None
        taken["node1"].close()  # the launcher is gone
        out, _ = child.communicate(timeout=10)
    finally:
        listener.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (child.returncode, out.strip()) == (0, "hup")


@pytest.mark.launch
def test_a_launcher_it_cannot_reach_is_said_once_and_the_agent_goes_on() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nobody listens there now
    text = dialback_client.dialback_text(port, bytes(32), "node1").strip()
    child = subprocess.run(
        [sys.executable, "-c", _WATCHER.replace("time.sleep(30)", "time.sleep(2)"), text, "r1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert child.returncode == 3, child.stderr  # no SIGHUP: it went on
    assert child.stderr.count("cannot reach the launcher at 127.0.0.1") == 1, child.stderr
    assert "a partition will not be noticed here" in child.stderr
