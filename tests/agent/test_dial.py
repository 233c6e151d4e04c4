"""A pdsh agent's way back to its launcher: where it dials, and what it makes of a bad dial-back file (pure, and one
real socket that is not a launcher)."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.agent.dial import ADDR_VAR, DialError, dial, launcher_address


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
    with pytest.raises(DialError, match=ADDR_VAR):
        launcher_address({})


def test_a_bad_dial_file_is_a_wire_error_and_is_deleted(tmp_path: Path) -> None:
    path = tmp_path / "x.plan"
    path.write_text("run 0 abc\n")
    with pytest.raises(wire.WireError):
        dial(str(path), "r1", {ADDR_VAR: "127.0.0.1"})
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
    path.write_text(wire.dial_text(port, bytes(32), "node1"))
    try:
        with pytest.raises(DialError, match="did not answer as a dslaunch launcher"):
            dial(str(path), "r1", {ADDR_VAR: "127.0.0.1"})
    finally:
        server.close()
    assert not path.exists()
