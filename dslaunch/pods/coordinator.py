"""Node rank 0's side of the pods' control channel: the job's meeting point.

The coordinator listens for the whole job. For each attempt it waits until every other pod has joined (each a new,
authenticated connection), tells them all to start, and then is one :class:`PodLink` handle per pod in
``job/loop.py``: a pod's events come in on its link, and the ones the other pods need (rank exits, lost pods) are
relayed to them at once, so every pod's launcher knows the job's root cause. A pod whose connection drops or goes
silent is lost. At the attempt's end every pod gets the job's exit code and whether another attempt follows.

A connection is admitted only after the handshake (``auth/handshake.py``), which ``pods/admission.py`` runs on one
thread for every connection, bounded in time, bytes and count: a pod proves itself in its first line, so junk,
slow clients and floods cost bounded memory, never reach the job, and never keep a real pod out.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from dslaunch import wire
from dslaunch.auth import handshake
from dslaunch.job.protocols import AgentHandle
from dslaunch.pods import assign, messages
from dslaunch.pods.admission import Door
from dslaunch.pods.assign import Shape, Waiting
from dslaunch.pods.link import SILENT, Link
from dslaunch.pods.shape import mismatch
from dslaunch.wire_check import Malformed

END_DRAIN = 2.0  # how long the coordinator waits for the pods to take the end of an attempt


class Coordinator:
    def __init__(self, key: bytes, run_id: str, shape: Shape, agreed: Mapping[str, str] | None = None) -> None:
        """``agreed``: what every pod must have been given alike (pods/shape.py); None: not checked."""
        self.key = key
        self.run_id = run_id
        self.shape = shape
        self.agreed = agreed
        self.mismatch = ""  # a fixed job's pod refused for its shape: the job cannot start (in these words)
        self.joined: dict[int, tuple[Waiting, Link]] = {}  # pods waiting for the next attempt, by join order
        self.current: list[PodLink] = []
        self.attempt = 0  # the attempt running, or last run
        self.seen = -1  # the latest attempt a joining pod took part in (a recreated coordinator goes on from it)
        self._joins = 0
        self._cond = threading.Condition()
        self._door = Door(key, run_id, self._admit)

    @property
    def turned_away(self) -> int:
        """Connections dropped before they joined (pods/admission.py)."""
        return self._door.turned_away

    def listen(self, port: int) -> None:
        """Listen on every address of this pod (raises OSError if the port is taken)."""
        if socket.has_dualstack_ipv6():
            server = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=128)
        else:
            server = socket.create_server(("", port), backlog=128)
        self._door.open(server)

    def gather(self, deadline: float, stopped: list[int]) -> bool:
        """Wait until the next attempt can start (``assign.ready``), the deadline passes or a signal comes."""
        enough_since: float | None = None
        with self._cond:
            while True:
                waiting = self._waiting()
                now = time.monotonic()
                if enough_since is None and assign.enough(self.shape, waiting):
                    enough_since = now
                elif not assign.enough(self.shape, waiting):
                    enough_since = None
                if assign.ready(self.shape, waiting, enough_since, now):
                    return True
                if stopped or now >= deadline or self.mismatch:
                    return False
                self._cond.wait(min(0.1, max(0.0, deadline - now)))

    def lacking(self) -> str:
        """Which pods the next attempt still lacks, in words."""
        with self._cond:
            waiting = self._waiting()
        if self.shape.fixed:
            return f"node(s) {', '.join(map(str, sorted(assign.missing(self.shape, waiting))))}"
        return f"pods: {1 + len(waiting)} of at least {self.shape.nnodes_min}"

    def start(self, attempt: int, host: str, check: Callable[[list[str]], object]) -> tuple[list[PodLink], list[str]]:
        """Start ``attempt`` (``host``: ours) on the pods ``assign`` picks: their handles in node-rank order, and
        every node's host; the pods left over are told they stand by. ``check(hosts)`` runs first: what it raises
        starts nothing (the pods stay joined)."""
        with self._cond:
            waiting = {key: pair for key, pair in self.joined.items() if not pair[1].closed}
            ranks, standbys = assign.assign(self.shape, [w for w, _link in waiting.values()])
            by_rank = sorted((rank, key) for key, rank in ranks.items())
            check([host, *(waiting[key][0].host for _rank, key in by_rank)])
            self.joined = {key: waiting[key] for key in standbys}
            self.attempt = attempt
            # under the lock: a pod joining from now on hears that it stands by (_handshake)
            self.current = [PodLink(self, rank, waiting[key][0].host, waiting[key][1]) for rank, key in by_rank]
        hosts = [host, *(pod.host for pod in self.current)]
        for pod in self.current:
            pod.link.send({"t": "start", "attempt": attempt, "node_rank": pod.node_rank, "hosts": hosts})
        for key in standbys:
            self.joined[key][1].send({"t": "standby", "attempt": attempt, "nnodes": len(hosts)})
        return self.current, hosts

    def relay(self, event: wire.Event, source: int) -> None:
        """Send ``event`` to every pod of the attempt but ``source`` (the node rank it concerns)."""
        data = messages.encoded(event)
        for pod in self.current:
            if pod.node_rank != source:
                pod.link.send_raw(data)

    def finish(self, code: int, last: bool, cause: str = "") -> None:
        """End the attempt on every pod: the job's exit code, whether no attempt follows, and its cause in words."""
        with self._cond:  # a pod re-joining for the next attempt while these links drain is no duplicate
            ending, self.current = self.current, []
        for pod in ending:
            pod.link.send({"t": "end", "code": code, "last": last, "cause": cause[:1000]})
        deadline = time.monotonic() + END_DRAIN
        for pod in ending:
            pod.drain(deadline)

    def close(self, code: int, why: str = "") -> None:
        """The job is over: stop listening, and end the pods still waiting (standbys) with ``code``; ``why``:
        the job never started."""
        self._door.close()
        with self._cond:
            pairs, self.joined = list(self.joined.values()), {}
        for _waiting, link in pairs:
            link.send({"t": "refused", "why": why} if why else {"t": "end", "code": code, "last": True})
            link.close()

    def _waiting(self) -> list[Waiting]:
        return [w for w, link in self.joined.values() if not link.closed]

    # ---- admission (pods/admission.py checks who it is; this decides whether it joins) ---------------------------
    def _admit(self, conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes) -> None:
        """(Raises OSError for a connection that fails meanwhile: the door closes it.)"""
        conn.settimeout(SILENT)
        with self._cond:
            why = self._refusal(joiner.node_rank) or self._misfit(joiner)
            if why is None:
                conn.sendall(handshake.welcome(self.key, self.run_id, server_nonce, joiner.nonce))
                to_pod, from_pod = handshake.session_keys(self.key, self.run_id, server_nonce, joiner.nonce)
                link = Link(conn, joiner.host, rest, keys=(to_pod, from_pod))
                link.start_reader()
                link.start_heartbeats()
                self._joins += 1
                self.joined[self._joins] = (Waiting(self._joins, joiner.node_rank, joiner.host), link)
                self.seen = max(self.seen, joiner.seen)
                if self.current:  # an attempt runs without it: it stands by for the next
                    link.send({"t": "standby", "attempt": self.attempt, "nnodes": 1 + len(self.current)})
                self._cond.notify_all()
                return
        conn.sendall(handshake.line({"t": "refused", "why": why}))  # in the handshake: no MAC yet
        conn.close()

    def _misfit(self, joiner: handshake.Joiner) -> str | None:
        """Why a pod given another shape than ours cannot join (said here too; called with the lock held), or None.
        A fixed job cannot start without that node: ``gather`` ends at once."""
        if self.agreed is None:
            return None
        who = f"pod {joiner.node_rank} ({joiner.host})" if joiner.node_rank >= 0 else f"the pod on {joiner.host}"
        found = mismatch(self.agreed, dict(joiner.shape), who)
        if found is None:
            return None
        for_the_pod, here = found
        _say(f"dslaunch: refused a pod: {here}")
        if self.shape.fixed:
            self.mismatch = here
            self._cond.notify_all()
        return for_the_pod

    def _refusal(self, node_rank: int) -> str | None:
        """Why a pod of this node rank cannot join (called with the lock held), or None."""
        if not self.shape.fixed:
            return None
        if not 0 < node_rank < self.shape.nnodes_max:
            last = self.shape.nnodes_max - 1
            return f"node rank {node_rank} is not one of this job's (0..{last}; 0 is the coordinator)"
        held = next((link for w, link in self.joined.values() if w.node_rank == node_rank and not link.closed), None)
        held = held or next((p.link for p in self.current if p.node_rank == node_rank and not p.link.closed), None)
        if held is not None:
            return f"node rank {node_rank} has already joined (from {held.peer})"
        return None


class PodLink(AgentHandle):
    """The coordinator's handle on one pod for one attempt (an ``AgentHandle``, ``job/protocols.py``)."""

    def __init__(self, coordinator: Coordinator, node_rank: int, host: str, link: Link) -> None:
        self.coordinator = coordinator
        self.node_rank = node_rank
        self.host = host
        self.link = link
        self.ranks: frozenset[int] | None = None  # its ranks in the attempt, once laid out: it speaks for no other
        self._lines = link.received()
        self._ended = threading.Event()
        self._asked_to_stop = False
        self._failed_rank = False

    def lines(self) -> Iterator[str]:
        try:
            for line in self._lines:
                try:
                    event = messages.from_pod(line, self.node_rank, self.ranks)
                except Malformed as exc:  # the pod is lost, with why; nothing it said is acted on
                    messages.note(str(exc), self.host)
                    self.link.refuse(str(exc))
                    break
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
                yield wire.encode(event)  # one of messages.POD_EVENTS, re-encoded from what was checked
            why = lost_why(self.link.why, "its launcher", self.link.detail)
            lost = wire.NodeLost(self.node_rank, self.host, None, why)
            self.coordinator.relay(lost, self.node_rank)
            yield wire.encode(lost)
        finally:
            self._ended.set()

    def stop(self) -> None:
        if not self._asked_to_stop:
            self._asked_to_stop = True
            self.link.send({"t": "stop"})

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        if not self._asked_to_stop or now:
            self._asked_to_stop = True
            self.link.send({"t": "stop", "signum": int(signum), "now": now})

    def stop_at(self, step: int) -> None:
        self.link.send({"t": "stop_at", "step": int(step)})

    def signal(self, signum: int) -> None:
        if signum == wire.STACKS_SIGNAL:  # the hang watch's request; users' signals stay on the pod they reach
            self.link.send({"t": "signal", "signum": int(signum)})

    def kill(self) -> None:
        self.link.close()

    def wait(self, timeout: float | None) -> int | None:
        return 0 if self._ended.wait(timeout) else None

    def drain(self, deadline: float) -> None:
        """Wait until the pod closes its side (so the end message is not cut off by a reset), or the deadline."""
        try:
            self.link.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.link.wait_closed(max(0.0, deadline - time.monotonic()))  # its reader sees the pod's side close
        self.link.close()


def left_by_signal(done: wire.Done, explained: bool, host: str) -> wire.NodeLost | None:
    """A pod that ended with 128+N, no failed rank and no stop asked of it: its launcher got signal N (a requested
    stop is no loss: its ``StopAsked`` stopped every pod)."""
    if explained or done.code <= 128 or done.stopped_by is not None:
        return None
    signum = done.code - 128
    name = wire.exit_code_of(-signum)[1] or f"signal {signum}"
    return wire.NodeLost(done.node_rank, host, -signum, f"its launcher received {name}")


def lost_why(how: str, who: str, detail: str = "") -> str:
    """Words for how a link ended (``Link.why``; ``detail``: ``Link.detail``)."""
    if how == "malformed":
        return f"{who} sent a malformed message ({detail})"
    if how == "forged":
        return f"a message on {who}'s connection failed its MAC (altered, replayed, reordered or injected?)"
    if how == "silent":
        return f"nothing heard from {who} for {SILENT:g} s (powered off or cut off from the network?)"
    if how == "oversized":
        return f"{who} sent a message over the size limit"
    return f"{who}'s connection dropped"


def _say(text: str) -> None:
    from dslaunch.output.sink import STALL, write_within

    write_within(2, (text + "\n").encode(), STALL)
