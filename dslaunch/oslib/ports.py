"""A port for a server that listens later (``--master-port 0``), picked where no outgoing connection takes one.

``bind(0)`` hands out a port of the kernel's ephemeral range, the range every outgoing connection on the machine
draws its own port from: between the pick and rank 0's TCPStore binding it, one did (EADDRINUSE in CI, port 33001,
with ssh and gloo connections of other tests on the machine). So the port is drawn at random below that range
(above it when there is no room below), and kept only if it binds on every address.
"""

from __future__ import annotations

import random
import socket

LOWEST = 20000  # below: the well-known and registered services people run
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
LINUX_DEFAULT = (32768, 60999)
_MIN_POOL = 1000
_TRIES = 64


def ephemeral_range(text: str | None) -> tuple[int, int]:
    """The kernel's ephemeral range from the text of ``ip_local_port_range``; Linux's default when unreadable."""
    parts = (text or "").split()
    if len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts):
        low, high = int(parts[0]), int(parts[1])
        if 0 < low <= high < 65536:
            return low, high
    return LINUX_DEFAULT


def outside(low: int, high: int) -> range:
    """Where to draw from, given the ephemeral range: below it from LOWEST, else above it, else nowhere."""
    if low - LOWEST >= _MIN_POOL:
        return range(LOWEST, low)
    if 65535 - high >= _MIN_POOL:
        return range(high + 1, 65536)
    return range(0)


def listen_port(host: str = "") -> int:
    """A port free on every address of this machine, outside the ephemeral range when there is room.

    Raises OSError when ``host`` is not an address of this machine."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        fallback = int(s.getsockname()[1])
    pool = outside(*ephemeral_range(_read(EPHEMERAL_RANGE)))
    for port in random.sample(pool, min(_TRIES, len(pool))):
        if _binds(family, port):
            return port
    return fallback


def _binds(family: socket.AddressFamily, port: int) -> bool:
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind(("::" if family == socket.AF_INET6 else "", port))
        return True
    except OSError:
        return False


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
