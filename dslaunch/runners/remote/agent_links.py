"""The launcher's port for the agents that dial back to it (agent/dialback_client.py): pdsh's job agents and
one-attempt agents, and the agents mpirun starts.

Each agent is let in as a pod is by its coordinator (``channel/``), under a secret the launcher made for the job
and staged (0600) or exported to its agents: the agent's ``hello`` first (``channel/door.py``: a flood of
connections without the secret costs no thread and never keeps an agent out), the launcher's challenge, the
agent's answer naming its node rank (-1: a job agent, which takes any) and its name (the host's in the plan, or
``mpi_env.dial_name``), and the launcher's welcome, which proves the launcher holds the secret too. From then on
the connection is a ``channel.link.Link``: every line MACed both ways under that connection's own keys (an
altered, replayed, reordered or injected line ends it), heartbeats both ways, and silence taken as a loss. The
agent sends nothing but heartbeats; anything else ends its link.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

from dslaunch.channel import admit, handshake
from dslaunch.channel.door import Door
from dslaunch.channel.link import Link


class AgentLinks:
    """The job's dial-back port: the agents' links by name, as they come."""

    def __init__(self, run_id: str, secret: bytes) -> None:
        self.run_id = run_id
        self.secret = secret
        if socket.has_dualstack_ipv6():
            server = socket.create_server(
                ("", 0), family=socket.AF_INET6, dualstack_ipv6=True, backlog=socket.SOMAXCONN
            )
        else:
            server = socket.create_server(("0.0.0.0", 0), backlog=socket.SOMAXCONN)
        self.port: int = server.getsockname()[1]
        self._links: dict[str, Link] = {}
        self._cond = threading.Condition()
        self._door = Door(secret, run_id, self._admit)
        self._door.open(server)

    @property
    def turned_away(self) -> int:
        """Connections dropped before they were let in (channel/door.py)."""
        return self._door.turned_away

    def _admit(self, conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes) -> None:
        link = admit.welcome(conn, joiner, server_nonce, rest, key=self.secret, run_id=self.run_id)
        link.start_heartbeats()
        threading.Thread(target=_read, args=(link,), name=f"agent {joiner.host}", daemon=True).start()
        with self._cond:
            old = self._links.pop(joiner.host, None)
            self._links[joiner.host] = link
            self._cond.notify_all()
        if old is not None:
            old.close()  # that agent dialled again: its old connection is dead

    def joined(self, name: str) -> bool:
        with self._cond:
            link = self._links.get(name)
        return link is not None and not link.closed

    def send(self, name: str, data: bytes) -> bool:
        """Whole lines to the agent of ``name`` on the link it keeps (agent/dialback_client.py::watch_launcher);
        False when it has none."""
        with self._cond:
            link = self._links.get(name)
        return link is not None and link.send_raw(data)

    def take(self, names: Sequence[str], deadline: float, gone: Callable[[str], bool]) -> dict[str, Link]:
        """The links of the agents of ``names``, as they dial back, until each has, or its transport ended
        (``gone``), or ``deadline`` (monotonic): theirs from now on."""
        taken: dict[str, Link] = {}
        with self._cond:
            while True:
                for name in names:
                    if name not in taken and name in self._links:
                        taken[name] = self._links.pop(name)
                waiting = [n for n in names if n not in taken and not gone(n)]
                left = deadline - time.monotonic()
                if not waiting or left <= 0:
                    return taken
                self._cond.wait(min(left, 0.1))

    def close(self) -> None:
        self._door.close()
        with self._cond:
            links, self._links = list(self._links.values()), {}
        for link in links:
            link.close()


def _read(link: Link) -> None:
    """Every line the agent sends, until its link ends: heartbeats only (the link takes them off)."""
    for line in link.lines():
        link.refuse(f"an agent sends nothing but heartbeats, not {line[:40]!r}")
        return
