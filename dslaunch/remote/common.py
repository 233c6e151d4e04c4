"""Pieces both remote runners share: a free-port probe, stderr relay, keepalive timing."""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from dslaunch.limits import ascii_int
from dslaunch.plan import RemoteSettings

KEEPALIVE_COUNT = 3  # unanswered keepalives before a node counts as lost (a network partition)


def keepalive_interval(settings: RemoteSettings) -> int:
    """Seconds between keepalives: a silent node is declared lost after about --ssh-connect-timeout."""
    return max(1, round(settings.connect_timeout / KEEPALIVE_COUNT))


def write_err(data: bytes) -> None:
    """To our stderr, never waiting for its reader (``output/lanes.py``): :func:`flush_err` waits."""
    from dslaunch.output.lanes import ERR

    ERR.write(data)


def flush_err() -> None:
    """Until what ``write_err`` took is out, or our stderr took nothing for half a second."""
    from dslaunch.output.lanes import ERR
    from dslaunch.output.sink import STALL

    ERR.flush(STALL)


def relay_lines(lines: Iterable[bytes]) -> None:
    """Copy a remote stderr stream to ours, one whole line at a time."""
    for line in lines:
        write_err(line if line.endswith(b"\n") else line + b"\n")


def port_probe_command(python: str) -> str:
    """Pick node 0's master port there as the local runner does here (oslib/ports.py, sent as its source: a host's
    python need not import dslaunch before its venv script ran)."""
    from dslaunch.oslib import ports

    with open(ports.__file__, encoding="utf-8") as f:
        code = f.read() + "\nprint(listen_port())\n"
    return shlex.join([python, "-c", code])


def parse_port(output: str) -> int | None:
    text = output.strip().splitlines()[-1:] if output.strip() else []
    port = ascii_int(text[0]) if text else None
    return port if port is not None and 0 < port < 65536 else None
