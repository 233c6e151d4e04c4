"""Node rank 0's side of the pods' control channel: the job's meeting point.

The coordinator listens for the whole job. For each attempt it waits until every other pod has joined (each a new,
authenticated connection), tells them all to start, and then is one :class:`PodLink` handle per pod in
``job/loop.py``: a pod's events come in on its link, and the ones the other pods need (rank exits, lost pods) are
relayed to them at once, so every pod's launcher knows the job's root cause. A pod whose connection drops or goes
silent is lost. At the attempt's end every pod gets the job's exit code and whether another attempt follows.

A connection is admitted only after the handshake (``pods/handshake.py``), read with a deadline and a byte bound;
at most ``MAX_PENDING`` handshakes run at once and further connections are closed unread, so junk, slow clients
and floods cost bounded memory and never reach the job.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

from dslaunch import wire
from dslaunch.pods import handshake
from dslaunch.pods.link import SILENT, Link, read_handshake_line

MAX_PENDING = 32
HANDSHAKE_TIME = 5.0
END_DRAIN = 2.0  # how long the coordinator waits for the pods to take the end of an attempt


class Coordinator:
    def __init__(self, key: bytes, run_id: str, expected: set[int]) -> None:
        self.key = key
        self.run_id = run_id
        self.expected = expected  # the node ranks of the other pods
        self.joined: dict[int, Link] = {}  # pods waiting for the next attempt's start
        self.current: list[PodLink] = []
        self.turned_away = 0  # connections that failed the handshake or came in excess
        self.seen = -1  # the latest attempt a joining pod took part in (a recreated coordinator goes on from it)
        self._cond = threading.Condition()
        self._pending = threading.BoundedSemaphore(MAX_PENDING)
        self._server: socket.socket | None = None

    def listen(self, port: int) -> None:
        """Listen on every address of this pod (raises OSError if the port is taken)."""
        if socket.has_dualstack_ipv6():
            server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
        else:
            server = socket.create_server(("", port), backlog=128)
        self._server = server
        threading.Thread(target=self._accept_loop, args=(server,), name="pods accept", daemon=True).start()

    def gather(self, deadline: float, stopped: list[int]) -> set[int]:
        """Wait until every other pod has joined, the deadline passes or a signal comes; the pods missing."""
        with self._cond:
            while True:
                missing = {r for r in self.expected if r not in self.joined or self.joined[r].closed}
                if not missing or stopped or time.monotonic() >= deadline:
                    return missing
                self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    def start(self, attempt: int, host: str) -> list[PodLink]:
        """Tell every joined pod to start ``attempt`` (``host``: ours): the attempt's handles, in node-rank order."""
        with self._cond:
            links, self.joined = self.joined, {}
        self.current = [PodLink(self, rank, links[rank]) for rank in sorted(links)]
        for pod in self.current:
            pod.link.send({"t": "start", "attempt": attempt, "host": host})
        return self.current

    def refuse_joined(self, why: str) -> None:
        with self._cond:
            links, self.joined = self.joined, {}
        for link in links.values():
            link.send({"t": "refused", "why": why})
            link.close()

    def relay(self, event: wire.Event, source: int) -> None:
        """Send ``event`` to every pod of the attempt but ``source`` (the node rank it concerns)."""
        data = wire.encode(event).encode()
        for pod in self.current:
            if pod.node_rank != source:
                pod.link.send_raw(data)

    def finish(self, code: int, last: bool) -> None:
        """End the attempt on every pod: the job's exit code, and whether no attempt follows."""
        for pod in self.current:
            pod.link.send({"t": "end", "code": code, "last": last})
        deadline = time.monotonic() + END_DRAIN
        for pod in self.current:
            pod.drain(deadline)
        self.current = []

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.refuse_joined("the job is over")

    # ---- admission -----------------------------------------------------------------------------------
    def _accept_loop(self, server: socket.socket) -> None:
        while True:
            try:
                conn, _addr = server.accept()
            except OSError:
                return  # closed
            if not self._pending.acquire(blocking=False):
                self.turned_away += 1
                conn.close()
                continue
            threading.Thread(target=self._admit, args=(conn,), daemon=True).start()

    def _admit(self, conn: socket.socket) -> None:
        try:
            link = self._handshake(conn)
        finally:
            self._pending.release()
        if link is None:
            self.turned_away += 1
            conn.close()

    def _handshake(self, conn: socket.socket) -> Link | None:
        deadline = time.monotonic() + HANDSHAKE_TIME
        server_nonce = handshake.nonce()
        try:
            conn.settimeout(HANDSHAKE_TIME)
            conn.sendall(handshake.challenge(server_nonce))
        except OSError:
            return None
        got = read_handshake_line(conn, handshake.MAX_LINE, deadline)
        joiner = handshake.check_answer(self.key, self.run_id, server_nonce, got[0]) if got else None
        if joiner is None or got is None:
            return None
        link = Link(conn, joiner.host, got[1])
        why = self._refusal(joiner.node_rank)
        if why is not None:
            link.send({"t": "refused", "why": why})
            link.close()
            return link
        link.send_raw(handshake.welcome(self.key, self.run_id, server_nonce, joiner.nonce))
        link.start_heartbeats()
        with self._cond:
            self.joined[joiner.node_rank] = link
            self.seen = max(self.seen, joiner.seen)
            self._cond.notify_all()
        return link

    def _refusal(self, node_rank: int) -> str | None:
        if node_rank not in self.expected:
            ranks = sorted(self.expected | {0})
            return f"node rank {node_rank} is not one of this job's ({ranks[0]}..{ranks[-1]}; 0 is the coordinator)"
        with self._cond:
            held = self.joined.get(node_rank)
            if held is not None and not held.closed:
                return f"node rank {node_rank} has already joined (from {held.peer})"
        return None


class PodLink:
    """The coordinator's handle on one pod for one attempt (an ``AgentHandle``, ``job/protocols.py``)."""

    def __init__(self, coordinator: Coordinator, node_rank: int, link: Link) -> None:
        self.coordinator = coordinator
        self.node_rank = node_rank
        self.host = link.peer
        self.link = link
        self._lines = link.lines()
        self._ended = threading.Event()
        self._asked_to_stop = False
        self._failed_rank = False

    def lines(self) -> Iterator[str]:
        try:
            for line in self._lines:
                event = wire.decode(line)
                if isinstance(event, wire.RankExit):
                    self._failed_rank |= event.failed and not event.by_agent
                    self.coordinator.relay(event, self.node_rank)
                elif isinstance(event, wire.Done):
                    left = left_by_signal(event, self._failed_rank or self._asked_to_stop, self.host)
                    if left is not None:
                        self.coordinator.relay(left, self.node_rank)
                        yield wire.encode(left)
                    yield line
                    return
                if isinstance(event, (wire.RankExit, wire.Idle, wire.Stacks)):
                    yield wire.encode(event)
            lost = wire.NodeLost(self.node_rank, self.host, None, lost_why(self.link.why, "its launcher"))
            self.coordinator.relay(lost, self.node_rank)
            yield wire.encode(lost)
        finally:
            self._ended.set()

    def stop(self) -> None:
        if not self._asked_to_stop:
            self._asked_to_stop = True
            self.link.send({"t": "stop"})

    def signal(self, signum: int) -> None:
        if signum == wire.STACKS_SIGNAL:  # the hang watch's request; users' signals stay on the pod they reach
            self.link.send({"t": "signal", "signum": int(signum)})

    def kill(self) -> None:
        self.link.close()

    def wait(self, timeout: float | None) -> int | None:
        return 0 if self._ended.wait(timeout) else None

    def drain(self, deadline: float) -> None:
        """Read until the pod closes its side (so the end message is not cut off by a reset), or the deadline."""
        try:
            self.link.sock.shutdown(socket.SHUT_WR)
            while time.monotonic() < deadline:
                self.link.sock.settimeout(max(0.01, deadline - time.monotonic()))
                if not self.link.sock.recv(65536):
                    break
        except OSError:
            pass
        self.link.close()


def left_by_signal(done: wire.Done, explained: bool, host: str) -> wire.NodeLost | None:
    """A pod that ended with 128+N, no failed rank and no stop asked of it: its launcher got signal N."""
    if explained or done.code <= 128:
        return None
    signum = done.code - 128
    name = wire.exit_code_of(-signum)[1] or f"signal {signum}"
    return wire.NodeLost(done.node_rank, host, -signum, f"its launcher received {name}")


def lost_why(how: str, who: str) -> str:
    """Words for how a link ended (``Link.why``)."""
    if how == "silent":
        return f"nothing heard from {who} for {SILENT:g} s (powered off or cut off from the network?)"
    if how == "oversized":
        return f"{who} sent a message over the size limit"
    return f"{who}'s connection dropped"
