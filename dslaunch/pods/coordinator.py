"""Node rank 0's side of the pods' control channel: the job's meeting point.

The coordinator listens for the whole job. For each attempt it waits until every other pod has joined (each a new,
authenticated connection), tells them all to start, and then is one handle for all of them in ``job/loop.py``
(``pods/attempt.py``): the pods' events come in on their links, and the ones the other pods need (failed ranks, lost
pods) are relayed to them at once, so every pod's launcher knows the job's root cause. A pod whose connection drops
or goes silent is lost. At the attempt's end every pod gets the job's exit code and whether another attempt follows.

Every connection is served on ONE thread (``channel/event_loop.py``), however many pods: the door (``channel/door.py``)
runs the handshake (``channel/handshake.py``), bounded in time, bytes and count: a pod proves itself in its first
line, so junk, slow clients and floods cost bounded memory, never reach the job, and never keep a real pod out.
Each admitted pod is a ``channel/loop_link.LoopLink``: MACed lines, heartbeats and silence, a bounded write buffer.
The decisions (``pods/assign.py``, ``job/state.py``) stay pure; this is their shell.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping

from dslaunch import wire
from dslaunch.channel import admit, handshake
from dslaunch.channel.door import Door
from dslaunch.channel.event_loop import Loop
from dslaunch.channel.link import server_beat
from dslaunch.channel.listener import more_open_files, open_server
from dslaunch.channel.loop_link import LinkClock, LoopLink
from dslaunch.job.elastic import named
from dslaunch.pods import assign
from dslaunch.pods.assign import Shape, Waiting
from dslaunch.pods.attempt import AttemptPods, Pod, left_by_signal, lost_why
from dslaunch.pods.shape import mismatch

__all__ = ["Coordinator", "left_by_signal", "lost_why"]

END_DRAIN = 2.0  # how long the coordinator waits for the pods to take the end of an attempt
# Past PACE_FROM pods the loop looks at its sockets at most every PACE s: a turn serves what came meanwhile (16,384
# pods' heartbeats in 200 turns a second, the join's handshakes in full turns: 1.1-1.3 tries a pod, not 2); below,
# each line is served at once (a standby's takeover is a chain of round trips).
PACE, PACE_FROM = 0.005, 1024
MAX_HELD = 16  # lines a pod may send before its attempt starts (none is expected); more: it is refused


class Coordinator:
    def __init__(self, key: bytes, run_id: str, shape: Shape, agreed: Mapping[str, str] | None = None) -> None:
        """``agreed``: what every pod must have been given alike (pods/shape.py); None: not checked."""
        self.key = key
        self.run_id = run_id
        self.shape = shape
        self.agreed = agreed
        self.mismatch = ""  # a fixed job's pod refused for its shape: the job cannot start (in these words)
        self.joined: dict[int, tuple[Waiting, LoopLink]] = {}  # pods waiting for the next attempt, by join order
        self.current: AttemptPods | None = None
        self.attempt = 0  # the attempt running, or last run
        self.seen = -1  # the latest attempt a joining pod took part in (a recreated coordinator goes on from it)
        self.loop = Loop("pods coordinator", pace=PACE if shape.nnodes_max > PACE_FROM else 0.0)
        self.clock = LinkClock(self.loop, beat=server_beat(shape.nnodes_max))
        self._holders: dict[int, LoopLink] = {}  # a fixed job's node ranks: the link of the pod that joined as it
        self._held: dict[LoopLink, list[bytes]] = {}  # lines pods sent before their attempt started (the loop's)
        self._joins = 0
        self._cond = threading.Condition()
        self._door = Door(key, run_id, self._admit, loop=self.loop, blocking=False)

    @property
    def turned_away(self) -> int:
        """Connections dropped before they joined (channel/door.py)."""
        return self._door.turned_away

    @property
    def tries(self) -> int:
        """Connections accepted (channel/door.py)."""
        return self._door.tries

    def listen(self, port: int) -> None:
        """Listen on every address of this pod (raises OSError if the port is taken)."""
        more_open_files()
        self._door.open(open_server(port))
        self.loop.start()

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
            return f"node(s) {named([str(n) for n in sorted(assign.missing(self.shape, waiting))])}"
        return f"pods: {1 + len(waiting)} of at least {self.shape.nnodes_min}"

    def start(self, attempt: int, host: str, check: Callable[[list[str]], object]) -> tuple[AttemptPods, list[str]]:
        """Start ``attempt`` (``host``: ours) on the pods ``assign`` picks: their handle (its pods in node-rank
        order), and every node's host; the pods left over are told they stand by. ``check(hosts)`` runs first: what
        it raises starts nothing (the pods stay joined)."""
        with self._cond:
            waiting = {key: pair for key, pair in self.joined.items() if not pair[1].closed}
            ranks, standbys = assign.assign(self.shape, [w for w, _link in waiting.values()])
            by_rank = sorted((rank, key) for key, rank in ranks.items())
            check([host, *(waiting[key][0].host for _rank, key in by_rank)])
            self.joined = {key: waiting[key] for key in standbys}
            self.attempt = attempt
            # under the lock: a pod joining from now on hears that it stands by (_admit)
            pods = AttemptPods(
                self.loop, self.relay, [Pod(rank, waiting[key][0].host, waiting[key][1]) for rank, key in by_rank]
            )
            self.current = pods
            standing_by = [self.joined[key][1] for key in standbys]
        hosts = [host, *(pod.host for pod in pods)]
        self._call(self._begin, pods, attempt, hosts, standing_by)
        return pods, hosts

    def _begin(self, pods: AttemptPods, attempt: int, hosts: list[str], standing_by: list[LoopLink]) -> None:
        pods.attach(self._held)
        # Our host and the attempt's size: every host to every pod is N^2 bytes (5 GB at 16,384 pods), and past
        # about 3,700 pods a line over the link's bound; the pods' events name their own hosts (member.Joined).
        told = hosts[:1]
        for pod in pods:
            pod.link.send(
                {"t": "start", "attempt": attempt, "node_rank": pod.node_rank, "hosts": told, "nnodes": len(hosts)}
            )
        standby = handshake.line({"t": "standby", "attempt": attempt, "nnodes": len(hosts)})
        for link in standing_by:
            link.send_raw(standby)

    def relay(self, event: wire.Event, source: int) -> None:
        """``event`` to every pod of the attempt but ``source`` (the node rank it concerns) where it changes what
        they do (``AttemptPods.pass_on``), from any thread."""
        current = self.current
        if current is not None:
            self._call(current.pass_on, event, source)

    def finish(self, code: int, last: bool, cause: str = "") -> None:
        """End the attempt on every pod: the job's exit code, whether no attempt follows, and its cause in words;
        back once every pod took it and closed its side, or after ``END_DRAIN``."""
        with self._cond:  # a pod re-joining for the next attempt while these links drain is no duplicate
            ending, self.current = self.current, None
            for pod in ending or ():
                if self._holders.get(pod.node_rank) is pod.link:
                    del self._holders[pod.node_rank]
        if ending is not None:
            end = handshake.line({"t": "end", "code": code, "last": last, "cause": cause[:1000]})
            self._drain([pod.link for pod in ending], end)

    def close(self, code: int, why: str = "") -> None:
        """The job is over: stop listening, and end the pods still waiting (standbys) with ``code``; ``why``:
        the job never started."""
        self._door.close()
        with self._cond:
            pairs, self.joined = list(self.joined.values()), {}
            running, self.current = self.current, None
            self._holders.clear()
        said = handshake.line({"t": "refused", "why": why} if why else {"t": "end", "code": code, "last": True})
        self._drain([link for _waiting, link in pairs], said)
        if running is not None:
            self._call(running.kill)
        if self.loop.running:
            self._call(self.clock.stop)
            self.loop.stop()

    def _drain(self, links: list[LoopLink], data: bytes) -> None:
        """Send ``data`` to each link and shut our side; wait until each pod closed its own (so what we sent is not
        cut off by a reset), or ``END_DRAIN``; then end every link."""
        if not links or not self.loop.running:
            return
        drained = threading.Event()
        self._call(self._drain_now, links, data, drained)
        drained.wait(END_DRAIN + 1.0)

    def _drain_now(self, links: list[LoopLink], data: bytes, drained: threading.Event) -> None:
        left = [link for link in links if not link.closed]

        def one_more(_link: LoopLink) -> None:
            left.pop()
            if not left:
                drained.set()

        for link in list(left):
            link.on_end = one_more
            link.send_raw(data)
            link.finish()

        def give_up() -> None:
            for link in list(left):
                link.close()
            drained.set()

        if left:
            self.loop.call_later(END_DRAIN, give_up)
        else:
            drained.set()

    def _call(self, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` on the loop's thread (at once if this is it, or if the loop does not run)."""
        if self.loop.in_loop() or not self.loop.running:
            fn(*args)
        else:
            self.loop.call_soon(fn, *args)

    def _waiting(self) -> list[Waiting]:
        return [w for w, link in self.joined.values() if not link.closed]

    # ---- admission (channel/door.py checks who it is; this decides whether it joins; the loop's thread) ---------
    def _admit(self, conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes) -> None:
        with self._cond:
            why = self._refusal(joiner.node_rank) or self._misfit(joiner)
            if why is None:
                welcome = handshake.welcome(self.key, self.run_id, server_nonce, joiner.nonce)
                to_pod, from_pod = handshake.session_keys(self.key, self.run_id, server_nonce, joiner.nonce)
                keys = (to_pod, from_pod)
                link = LoopLink(self.clock, conn, joiner.host, keys, pending=rest, greeting=welcome, long_lines=True)
                link.on_line = self._before_start
                link.on_end = self._gone
                self._joins += 1
                self.joined[self._joins] = (Waiting(self._joins, joiner.node_rank, joiner.host), link)
                self._holders[joiner.node_rank] = link
                self.seen = max(self.seen, joiner.seen)
                link.start()
                if self.current is not None and not link.closed:  # an attempt runs without it: it stands by
                    link.send({"t": "standby", "attempt": self.attempt, "nnodes": 1 + len(self.current)})
                if len(self.joined) + 1 >= self.shape.nnodes_min:  # gather counts again (else on its next look)
                    self._cond.notify_all()
                return
        admit.refuse(conn, why)  # in the handshake: no MAC yet

    def _before_start(self, link: LoopLink, payload: bytes) -> None:
        held = self._held.setdefault(link, [])
        held.append(payload)
        if len(held) > MAX_HELD:
            link.refuse(f"more than {MAX_HELD} messages before the attempt started")

    def _gone(self, link: LoopLink) -> None:
        self._held.pop(link, None)

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
        held = self._holders.get(node_rank)
        if held is not None and not held.closed:
            return f"node rank {node_rank} has already joined (from {held.peer})"
        return None


def _say(text: str) -> None:
    from dslaunch.output.sink import STALL, write_within

    write_within(2, (text + "\n").encode(), STALL)
