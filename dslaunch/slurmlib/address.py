"""The address ranks use to reach a Slurm node."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Mapping


def node_address(host: str, env: Mapping[str, str]) -> str:
    """``host`` if it resolves, else its NodeAddr from scontrol (node names need not be host names)."""
    try:
        socket.getaddrinfo(host, None)
        return host
    except (OSError, UnicodeError):
        pass
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "-o", host],
            capture_output=True,
            text=True,
            timeout=5,
            env=dict(env),
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return host
    match = re.search(r"\bNodeAddr=(\S+)", out)
    return match.group(1) if match else host
