"""Who holds a port, from /proc/net/tcp{,6}: the table's parse (pure) and a real listening socket named."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.oslib import port_holders
from dslaunch.oslib.port_holders import Holder

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(local: str, state: str, inode: int) -> str:
    return f"   0: {local} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1\n"


@pytest.mark.parametrize(
    "lines, port, expected",
    [
        ([row("0100007F:4F91", "0A", 77)], 20369, [Holder("listening", 77)]),
        ([row("0100007F:4F91", "01", 78)], 20369, [Holder("connected", 78)]),
        ([row("0100007F:4F91", "06", 0)], 20369, [Holder("time-wait", 0)]),
        ([row("0100007F:4F91", "02", 9)], 20369, [Holder("state 02", 9)]),
        ([row("0100007F:4F92", "0A", 77)], 20369, []),  # another port
        ([row("00000000000000000000000000000000:4F91", "0A", 5)], 20369, [Holder("listening", 5)]),  # tcp6
        (
            ["garbage\n", "   1: 0100007F 0 0A\n", row("0100007F:ZZZZ", "0A", 1), row("0100007F:4F91", "0A", -0)],
            20369,
            [Holder("listening", 0)],
        ),
        ([row("0100007F:4F91", "0A", 1).replace(" 1 1\n", " x 1\n")], 20369, []),  # inode not a number
        ([], 20369, []),
    ],
)
def test_the_table_names_the_sockets_of_one_port(lines: list[str], port: int, expected: list[Holder]) -> None:
    assert port_holders.parse_table(HEADER + "".join(lines), port) == expected


@given(st.text(max_size=400), st.integers(0, 65535))
def test_any_table_text_parses_without_raising(text: str, port: int) -> None:
    assert all(isinstance(h, Holder) for h in port_holders.parse_table(text, port))


def test_a_listening_socket_of_this_process_is_named_with_its_pid() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        said = port_holders.describe(port)
    assert said.startswith(f"held by pid {os.getpid()} (") and said.endswith(", listening"), said


def test_a_port_nobody_listens_on_or_connects_from_is_held_by_nobody() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound only: the kernel's table lists listening and connected sockets
        assert port_holders.describe(port) == ""
    with socket.create_server(("127.0.0.1", port)) as server:  # the same port, now listening: named
        assert port_holders.describe(server.getsockname()[1]).endswith("listening")
