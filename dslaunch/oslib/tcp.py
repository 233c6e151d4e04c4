"""TCP keepalive tight enough that a silent peer (a partition, a powered-off host) ends a connection within
``DEAD_AFTER`` seconds, idle or not: the kernel probes an idle one, and gives up on unacknowledged data as fast."""

from __future__ import annotations

import socket

IDLE, INTERVAL, COUNT = 1, 1, 3  # seconds idle before the first probe, between probes; probes unanswered
DEAD_AFTER = IDLE + INTERVAL * COUNT + 1  # the bound the docs give (docs/teardown.md)


def keep_alive(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (
        ("TCP_KEEPIDLE", IDLE),
        ("TCP_KEEPINTVL", INTERVAL),
        ("TCP_KEEPCNT", COUNT),
        ("TCP_USER_TIMEOUT", (DEAD_AFTER - 1) * 1000),
    ):
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
