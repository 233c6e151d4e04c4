"""A pdsh agent's way back to its launcher: where it dials, what it makes of a bad dial-back file or of a port that
is not a launcher, that it tries again while the launcher does not listen yet, and a one-attempt agent's liveness
line (real sockets, and agent-side processes)."""

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
from dslaunch.agent.dialback_client import ADDR_VAR, DialBackError, connect_back, dial_back, launcher_address
from dslaunch.channel.link import Link
from dslaunch.oslib.ports import listen_port
from dslaunch.runners.remote.agent_links import AgentLinks
from tests.runners.remote.relay import Relay


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


def test_a_port_that_is_not_a_launcher_is_refused_with_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dialback_client, "DIALBACK_TIMEOUT", 1.0)  # tried again until then
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


def test_the_agent_tries_again_until_its_launcher_listens() -> None:
    """The launcher's port does not take connections for a moment (here: nothing listens there yet); the agent's
    dial goes on within its bound, and gets in once it does."""
    secret = os.urandom(32)
    port = listen_port("127.0.0.1")
    links = AgentLinks("r1", secret)
    relays: list[Relay] = []
    later = threading.Timer(0.8, lambda: relays.append(Relay(links.port, port)))
    later.start()
    try:
        began = time.monotonic()
        text = dialback_client.dialback_text(port, secret, "node1")
        link, host = connect_back(text, "r1", {ADDR_VAR: "127.0.0.1"}, 10.0)
        assert host == "node1" and isinstance(link, Link)
        assert 0.8 <= time.monotonic() - began < 4.0  # at most a pause (1 s) after it listens, and load
        taken = links.take(["node1"], time.monotonic() + 5, lambda _h: False)
        assert list(taken) == ["node1"] and taken["node1"].send_raw(b"stop-at 3\n")
        assert next(link.lines()) == "stop-at 3\n"  # MACed by the launcher, checked here
        link.close()
    finally:
        later.join()
        links.close()
        for relay in relays:
            relay.close()


def test_an_agent_of_another_job_is_refused_at_once() -> None:
    links = AgentLinks("r1", os.urandom(32))
    try:
        text = dialback_client.dialback_text(links.port, os.urandom(32), "node1")
        began = time.monotonic()
        with pytest.raises(DialBackError, match=r"the launcher refused this agent: .* the job.s secret"):
            connect_back(text, "r1", {ADDR_VAR: "127.0.0.1"}, 10.0)
        assert time.monotonic() - began < 2
        assert not links.joined("node1")
    finally:
        links.close()


_WATCHER = """
import os, signal, sys, time
from dslaunch.agent import dialback_client
from dslaunch.agent.dialback_client import ADDR_VAR, watch_launcher
dialback_client.WATCH_TIMEOUT = 1.0
signal.signal(signal.SIGHUP, lambda *_: (print("hup", flush=True), os._exit(0)))
watch_launcher(sys.argv[1], sys.argv[2], {ADDR_VAR: "127.0.0.1"})
time.sleep(30)
os._exit(3)
"""


@pytest.mark.launch
def test_a_one_attempt_agent_is_told_when_its_line_to_the_launcher_ends() -> None:
    """The liveness line of a pdsh agent: once up, its end is SIGHUP to the agent (a stop signal)."""
    secret = os.urandom(32)
    listener = AgentLinks("r1", secret)
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
        [sys.executable, "-c", _WATCHER.replace("time.sleep(30)", "time.sleep(3)"), text, "r1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert child.returncode == 3, child.stderr  # no SIGHUP: it went on
    assert child.stderr.count("cannot reach the launcher at 127.0.0.1") == 1, child.stderr
    assert "a partition will not be noticed here" in child.stderr


_FORWARDING = """
import os, signal, sys, time
from dslaunch.agent.dialback_client import ADDR_VAR, watch_launcher
side, forward = os.pipe()
def hup(*_):
    os.set_blocking(side, False)
    try:
        got = os.read(side, 4096)
    except BlockingIOError:
        got = b""
    print("hup", got.decode().replace(chr(10), "|"), flush=True)
    os._exit(0)
signal.signal(signal.SIGHUP, hup)
watch_launcher(sys.argv[1], sys.argv[2], {ADDR_VAR: "127.0.0.1"}, forward, node_rank=1)
time.sleep(30)
os._exit(3)
"""


@pytest.mark.launch
@pytest.mark.parametrize(("how", "forwarded"), [("as sent", "stop-at 7|"), ("altered", ""), ("injected", "")])
def test_a_one_attempt_agent_takes_only_its_launchers_lines(how: str, forwarded: str) -> None:
    """What the launcher sends on the liveness line (a stop's step) reaches the agent's node loop as sent; a line
    altered or injected on the way (``stop-at 1``: the ranks would stop at once) ends the line instead, and the
    agent stops its node as for a lost launcher (SIGHUP), with none of it passed on."""
    secret = os.urandom(32)
    listener = AgentLinks("r1", secret)

    def tamper(line: bytes, n: int) -> list[bytes]:
        if n < 2 or not line.startswith(b"stop-at 7\t") or how == "as sent":
            return [line]
        return [line.replace(b"stop-at 7", b"stop-at 1")] if how == "altered" else [b"stop-at 1\n", line]

    relay = Relay(listener.port, tamper=tamper)
    text = dialback_client.dialback_text(relay.port, secret, "node1").strip()
    child = subprocess.Popen(
        [sys.executable, "-c", _FORWARDING, text, "r1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        taken = listener.take(["node1"], time.monotonic() + 15, lambda _h: False)
        assert list(taken) == ["node1"], "the agent's side did not dial back"
        assert taken["node1"].send_raw(b"stop-at 7\n")
        if how == "as sent":
            time.sleep(0.5)
            assert child.poll() is None
            taken["node1"].close()  # the launcher is gone
        out, err = child.communicate(timeout=10)
    finally:
        listener.close()
        relay.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    assert (child.returncode, out.strip()) == (0, f"hup {forwarded}".strip()), err
    assert ("a line failed its MAC" in err) == (how != "as sent"), err
