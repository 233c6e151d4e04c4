"""A control channel server's listening socket, sized for thousands of peers at once: the pods' coordinator
(``pods/coordinator.py``) and node 0's Slurm task (``runners/slurm/stop_channel.py``)."""

from __future__ import annotations

import resource
import socket


def open_server(port: int) -> socket.socket:
    """Listening on every address of this host at ``port`` (raises OSError if it is taken)."""
    backlog = listen_backlog()
    if socket.has_dualstack_ipv6():
        return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=backlog)
    return socket.create_server(("", port), backlog=backlog)


def listen_backlog() -> int:
    """As many connections waiting to be accepted as the kernel allows (a synchronized start of thousands of peers
    otherwise overflows it, and each waits out a SYN retry)."""
    try:
        with open("/proc/sys/net/core/somaxconn", encoding="ascii") as f:
            return max(128, min(65535, int(f.read())))
    except (OSError, ValueError):
        return 4096


def more_open_files(need: int | None = None) -> None:
    """The soft limit on open files raised to the hard one (a socket per peer, and the door's), or, given ``need``,
    to at least that many where it is lower (the processes this one starts later inherit what it leaves)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or (need is not None and soft >= need):
        return
    top = hard if hard != resource.RLIM_INFINITY else 1 << 20
    want = top if need is None else min(need, top)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError):
            pass
