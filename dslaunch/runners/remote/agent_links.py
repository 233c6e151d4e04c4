"""The launcher's port for the agents that dial back to it (agent/dialback_client.py): pdsh's job agents and
one-attempt agents, and the agents mpirun starts.

Each agent is let in as a pod is by its coordinator (``channel/``), under a secret the launcher made for the job
and staged (0600) or exported to its agents: the agent's ``hello`` first (``channel/door.py``: a flood of
connections without the secret never keeps an agent out), the launcher's challenge, the agent's answer naming its
node rank (-1: a job agent, which takes any) and its name (the host's in the plan, or ``mpi_env.dial_name``), and
the launcher's welcome, which proves the launcher holds the secret too. From then on the connection is a
``channel.loop_link.LoopLink``: every line MACed both ways under that connection's own keys (an altered, replayed,
reordered or injected line ends it), heartbeats both ways, silence taken as a loss, and a bounded write buffer. The
agent sends nothing but heartbeats; anything else ends its link.

Every agent is served on ONE thread (``channel/event_loop.py``), however many dial back: the door, each link's
reads and writes, and the heartbeats and silence of all of them (``loop_link.LinkClock``). The launcher's other
threads hold an agent's link as an :class:`AgentLink`, whose sends and close are handed to that thread, and whose
end they learn of by a callback run there (``when_ended``) or by waiting (``wait_closed``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

from dslaunch.channel import handshake
from dslaunch.channel.door import Door
from dslaunch.channel.event_loop import Loop
from dslaunch.channel.loop_link import LinkClock, LoopLink


class AgentLink:
    """One agent's link as the launcher's threads hold it: every method from any thread."""

    def __init__(self, loop: Loop, link: LoopLink) -> None:
        self.name = link.peer
        self._loop = loop
        self._link = link
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._closing = False
        self._on_end: Callable[[], object] | None = None

    @property
    def closed(self) -> bool:
        return self._ended.is_set()

    @property
    def why(self) -> str:
        """How it ended (``LoopLink.why``: "closed", "dropped", "silent", "forged", ...); "" while it has not."""
        return self._link.why if self._ended.is_set() else ""

    def send_raw(self, data: bytes) -> bool:
        """Whole lines to the agent, sealed on the loop's thread in the order handed in; False once the link has
        ended or was closed."""
        if self._closing or self._ended.is_set():
            return False
        if self._loop.in_loop():
            return self._link.send_raw(data)
        self._loop.call_soon(self._link.send_raw, data)
        return True

    def close(self) -> None:
        self._closing = True
        _call(self._loop, self._link.close)

    def wait_closed(self, timeout: float) -> bool:
        return self._ended.wait(timeout)

    def when_ended(self, fn: Callable[[], object]) -> None:
        """``fn()`` once the link has ended: on the loop's thread (it must be short and never block), or at once on
        this one if it already has."""
        with self._lock:
            if not self._ended.is_set():
                self._on_end = fn
                return
        fn()

    def _end(self, _link: LoopLink) -> None:
        """The link's ``on_end`` (the loop's thread)."""
        with self._lock:
            self._ended.set()
            fn, self._on_end = self._on_end, None
        if fn is not None:
            fn()


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
        self.loop = Loop(f"agent links {run_id}")
        self.clock = LinkClock(self.loop)
        self._links: dict[str, AgentLink] = {}  # by name, until taken
        self._live: dict[AgentLink, None] = {}  # every link not ended, taken or not (the loop's)
        self._cond = threading.Condition()
        self._door = Door(secret, run_id, self._admit, loop=self.loop, blocking=False)
        self._door.open(server)
        self.loop.start()

    @property
    def turned_away(self) -> int:
        """Connections dropped before they were let in (channel/door.py)."""
        return self._door.turned_away

    def _admit(self, conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes) -> None:
        """The loop's thread: ``joiner`` passed the handshake."""
        welcome = handshake.welcome(self.secret, self.run_id, server_nonce, joiner.nonce)
        keys = handshake.session_keys(self.secret, self.run_id, server_nonce, joiner.nonce)
        link = LoopLink(self.clock, conn, joiner.host, keys, pending=rest, greeting=welcome)
        agent = AgentLink(self.loop, link)
        link.on_line = _not_a_heartbeat
        link.on_end = lambda ended: self._gone(agent, ended)
        self._live[agent] = None
        with self._cond:
            old = self._links.pop(joiner.host, None)
            self._links[joiner.host] = agent
            self._cond.notify_all()
        if old is not None:
            old.close()  # that agent dialled again: its old connection is dead
        link.start()

    def _gone(self, agent: AgentLink, link: LoopLink) -> None:
        self._live.pop(agent, None)
        agent._end(link)

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

    def take(self, names: Sequence[str], deadline: float, gone: Callable[[str], bool]) -> dict[str, AgentLink]:
        """The links of the agents of ``names``, as they dial back, until each has, or its transport ended
        (``gone``), or ``deadline`` (monotonic): theirs from now on (a link taken may have ended already)."""
        taken: dict[str, AgentLink] = {}
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
        """Stop listening and end every link, taken or not (their end callbacks run), the clock and the loop."""
        self._door.close()
        with self._cond:
            self._links = {}
        if self.loop.running:
            self.loop.call_soon(self._close_all)
            self.loop.stop()

    def _close_all(self) -> None:
        for agent in list(self._live):
            agent._link.close()
        self.clock.stop()


def _not_a_heartbeat(link: LoopLink, payload: bytes) -> None:
    link.refuse(f"an agent sends nothing but heartbeats, not {payload[:40]!r}")


def _call(loop: Loop, fn: Callable[[], object]) -> None:
    """``fn()`` on the loop's thread (at once if this is it, or if the loop no longer runs)."""
    if loop.in_loop() or not loop.running:
        fn()
    else:
        loop.call_soon(fn)
