"""One handshake line off a socket: bounded in size and in time, whatever the other side sends."""

from __future__ import annotations

import socket
import time


def read_handshake_line(sock: socket.socket, limit: int, deadline: float) -> tuple[bytes, bytes] | None:
    """One line of at most ``limit`` bytes before ``deadline`` (monotonic), and what came after it; None when
    none comes in time, or a longer one (memory stays bounded)."""
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or len(data) > limit:
            return None
        sock.settimeout(left)
        try:
            chunk = sock.recv(limit + 1 - len(data))
        except OSError:
            return None
        if not chunk:
            return None
        data += chunk
    line, _, rest = data.partition(b"\n")
    return (line, rest) if len(line) <= limit else None
