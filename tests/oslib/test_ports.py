"""--master-port 0's pick: outside the ephemeral range every outgoing connection draws from (tables, real binds)."""

from __future__ import annotations

import random
import shlex
import socket
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.oslib import ports
from dslaunch.runners.remote.base import parse_port, port_probe_command


@pytest.mark.parametrize(
    "text, expected",
    [
        ("32768\t60999\n", (32768, 60999)),
        ("1024 65535", (1024, 65535)),
        ("40000 40000", (40000, 40000)),
        (None, ports.LINUX_DEFAULT),  # unreadable
        ("", ports.LINUX_DEFAULT),
        ("60999 32768", ports.LINUX_DEFAULT),
        ("0 100", ports.LINUX_DEFAULT),
        ("32768 70000", ports.LINUX_DEFAULT),
        ("٣٢٧٦٨ 60999", ports.LINUX_DEFAULT),  # digits, but not ASCII ones
        ("32768", ports.LINUX_DEFAULT),
    ],
)
def test_the_ephemeral_range_is_read_or_linux_default(text: str | None, expected: tuple[int, int]) -> None:
    assert ports.ephemeral_range(text) == expected


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (32768, 60999, range(20000, 32768)),  # Linux's default: below it
        (49152, 65535, range(20000, 49152)),  # IANA's
        (20500, 50000, range(50001, 65536)),  # no room below: above
        (1024, 65535, range(0)),  # everything ephemeral: the kernel's pick after all
    ],
)
def test_the_pool_lies_outside_the_ephemeral_range(low: int, high: int, expected: range) -> None:
    assert ports.outside(low, high) == expected


@given(st.text(max_size=30))
def test_any_text_gives_a_valid_range(text: str) -> None:
    low, high = ports.ephemeral_range(text)
    assert 0 < low <= high < 65536


def test_the_port_binds_and_lies_outside_this_machines_ephemeral_range() -> None:
    low, high = ports.ephemeral_range(ports._read(ports.EPHEMERAL_RANGE))
    pool = ports.outside(low, high)
    for _ in range(20):
        port = ports.listen_port("127.0.0.1")
        assert port in pool or not pool
        with socket.socket() as s:
            s.bind(("", port))


def test_a_port_taken_on_another_address_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server binding every address (TCPStore) fails where any address holds the port: the check binds them all."""
    with socket.socket() as held:
        # Below the ephemeral range, where no outgoing connection of another process takes taken + 1 meanwhile
        # (bind(0) drew from the ephemeral range: under load its next port was a connection's, 2 in 3 runs).
        taken = _held_below_ephemeral(held)
        monkeypatch.setattr(ports, "outside", lambda _low, _high: range(taken, taken + 2))
        for _ in range(10):
            assert ports.listen_port("127.0.0.1") == taken + 1


def _held_below_ephemeral(held: socket.socket) -> int:
    """Bind ``held`` on 127.0.0.3 to a port P of 20000-32000 whose P + 1 is free on every address; P."""
    for port in random.sample(range(20000, 32000), 200):
        if not ports._binds(socket.AF_INET, port + 1):
            continue
        try:
            held.bind(("127.0.0.3", port))
        except OSError:
            continue
        return port
    raise AssertionError("no free pair of ports in 20000-32000")


def test_an_address_of_another_machine_is_refused() -> None:
    with pytest.raises(OSError):
        ports.listen_port("192.0.2.1")  # TEST-NET-1: never an address of this machine


@pytest.mark.launch
def test_the_remote_probe_runs_with_a_bare_interpreter() -> None:
    """The probe is the module's own source: no dslaunch needed on the path (-I: isolated, no site-packages)."""
    argv = shlex.split(port_probe_command(sys.executable))
    done = subprocess.run([argv[0], "-I", *argv[1:]], capture_output=True, text=True, timeout=30, cwd="/")
    assert done.returncode == 0, done.stderr
    port = parse_port(done.stdout)
    assert port is not None and port in ports.outside(*ports.ephemeral_range(ports._read(ports.EPHEMERAL_RANGE)))
