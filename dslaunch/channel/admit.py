"""The server's last step of the handshake, for the servers of a job's control channels: the coordinator
(``pods/coordinator.py``) and node 0's Slurm task (``runners/slurm/stop_channel.py``).

``channel/door.py`` hands each a connection whose answer proved the job's secret (a ``handshake.Joiner``); the
server decides whether it takes that peer, and then either :func:`welcome` (the welcome that proves the server
holds the secret too, and the link, every line MACed under the connection's own keys) or :func:`refuse` (why,
in words, still in the handshake: the peer's dial ends there, ``channel/dial.py``). A server on an event loop
(the coordinator, the launcher that its agents dial back to: ``runners/remote/agent_links.py``) sends the same
welcome as its ``channel/loop_link.LoopLink``'s greeting instead.
"""

from __future__ import annotations

import socket

from dslaunch.channel import handshake
from dslaunch.channel.link import SILENT, Link


def welcome(
    conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes, *, key: bytes, run_id: str
) -> Link:
    """The link to ``joiner`` (``rest``: what came after its answer); raises OSError for a connection that fails
    meanwhile (the door closes it)."""
    conn.settimeout(SILENT)
    conn.sendall(handshake.welcome(key, run_id, server_nonce, joiner.nonce))
    to_client, to_server = handshake.session_keys(key, run_id, server_nonce, joiner.nonce)
    return Link(conn, joiner.host, rest, keys=(to_client, to_server))


def refuse(conn: socket.socket, why: str) -> None:
    """Tell the peer why it is not taken, and close (raises OSError as ``welcome``)."""
    try:
        conn.settimeout(SILENT)
        conn.sendall(handshake.refusal(why))
    finally:
        conn.close()
