"""One stop step across the nodes of a Slurm step (docs/stopping.md): node 0's task answers every task's proposal.

Each srun task is its own launcher (``in_step.py``), so no launcher sees every node's stop step. Node 0's task
listens on the first free of ``layout.stop_channel_ports(master_port)`` (:class:`Hub`); every other task connects
(to each in turn) at its first attempt, retrying for ``CONNECT_TIME`` while node 0's is not up yet (:class:`Spoke`),
and keeps the connection for every attempt. The connection is the pods' (``channel/``: ``dial`` and the ``door``'s
handshake, then every line MACed, heartbeats, bounded lines), under the job's secret (``DSLAUNCH_JOB_SECRET``;
``--launcher slurm`` makes one for its step). Node 0's task serves every task's connection on one thread, as the
pods' coordinator does (``channel/event_loop.py``, each a ``loop_link.LoopLink``): a step of thousands of tasks
costs it one thread, not three a task. Each other task keeps its one connection on a ``link.Link`` (threads of
its own). Two messages, checked field by field, anything else ends the link:

- a task to node 0: ``{"t": "propose", "attempt": A, "step": S | null}``, its agent's proposal (``wire.StopStep``);
- node 0 to every task: ``{"t": "stop_at", "attempt": A, "step": S}``, the job's step (``job/stop_gather.py``:
  the largest proposal, once every connected node proposed or at ``GATHER_BOUND``), also to a task that did not
  propose yet, so its ranks stop at that step too.

A node not connected yet is waited for, up to the bound, on both sides: node 0's task waits for its proposal,
the task sends it once connected (under load a task's first tries may come before node 0's task listens, and
nodes that stopped apart leave one node's ranks in a collective until the grace ends). A task that cannot reach
node 0's at all, or whose answer does not come within ``ANSWER_TIME`` (node 0 lost), answers its agent with its
own proposal: that node decides alone, as before the channel. The threads here (the hub's loop, a spoke's
link) take no lock that a forked agent could inherit held (no lazy import, no logging but the loop's of a handler
that raised, a bug): what went wrong is kept in ``notes``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from dslaunch.channel import admit, handshake
from dslaunch.channel.dial import Who, dial
from dslaunch.channel.door import Door
from dslaunch.channel.event_loop import Loop
from dslaunch.channel.link import Link
from dslaunch.channel.listener import more_open_files, open_server
from dslaunch.channel.loop_link import LinkClock, LoopLink
from dslaunch.job.stop_gather import GATHER_BOUND, StopStepGather
from dslaunch.wire_check import Int, Kinds, Malformed, Maybe, control

CONNECT_TIME = 60.0  # a task's tries to reach node 0's, from its first attempt (node 0's task may start later)
NAMES = ("node 0's task", "this task")  # in a refusal's words
ANSWER_TIME = GATHER_BOUND + 2.0  # a proposal's answer from node 0, or this node decides alone

_ATTEMPT = Int(0, 1 << 20)
_STEP = Int(1, 1 << 62)
TO_NODE0: Kinds = {"propose": ({"attempt": _ATTEMPT, "step": Maybe(_STEP)}, {})}
FROM_NODE0: Kinds = {"stop_at": ({"attempt": _ATTEMPT, "step": _STEP}, {})}

Answer = Callable[[int], None]  # the agent's stop_at


class _Attempt:
    """This task's side of one attempt: whom to answer, and whether it was."""

    def __init__(self, number: int, answer: Answer) -> None:
        self.number, self.answer = number, answer
        self.answered = False
        self.proposed = False
        self.own: int | None = None  # this node's proposal, once made
        self._lock = threading.Lock()

    def make(self, step: int | None) -> None:
        self.own, self.proposed = step, True

    def deliver(self, step: int) -> None:
        """Answer the agent once (the first step to come stands)."""
        with self._lock:
            if self.answered:
                return
            self.answered = True
        self.answer(step)

    def alone(self) -> None:
        """No answer from node 0: this node's own proposal (1: none of its ranks calls should_stop())."""
        if self.proposed:
            self.deliver(self.own or 1)


class Hub:
    """Node 0's task: gathers every node's proposal for each attempt and answers every task. Every connection is
    served on one thread (``channel/event_loop.py``), however many tasks: the door's handshakes, each task's
    ``LoopLink``, its lines and the gathers' bounds (loop timers); what this task's agent asks (``begin``,
    ``propose``) is handed to that thread."""

    def __init__(self, key: bytes, run_id: str, nnodes: int, port: int) -> None:
        """Listens at once; raises OSError where the port cannot be bound."""
        server = open_server(port)  # first: a port taken leaves nothing open
        more_open_files(2 * nnodes + 256)  # a socket per task, one more while a task reconnects, and the door's
        self.key, self.run_id, self.nnodes, self.port = key, run_id, nnodes, port
        self.notes: list[str] = []
        try:
            self.loop = Loop("stop channel")
        except OSError:
            server.close()
            raise
        self.clock = LinkClock(self.loop)
        # the loop's own, from here on:
        self._links: dict[int, LoopLink] = {}  # a node not yet connected may still come: waited for, up to the bound
        self._gone: set[int] = set()  # nodes whose link ended (and that have not reconnected)
        self._gathers: dict[int, StopStepGather] = {}
        self._current: _Attempt | None = None
        self._closing = False
        self._up_lock = threading.Lock()
        self._up: set[int] = set()  # the nodes connected, for any thread (``connected``)
        self._door = Door(key, run_id, self._admit, loop=self.loop, blocking=False)
        self._door.open(server)
        self.loop.start()

    @property
    def connected(self) -> frozenset[int]:
        with self._up_lock:
            return frozenset(self._up)

    def begin(self, attempt: int, answer: Answer) -> None:
        self._call(self._begin, attempt, answer)

    def propose(self, step: int | None) -> None:
        """This node's own proposal, for the current attempt."""
        self._call(self._own_proposal, step)

    def close(self) -> None:
        """Stop listening, end every link, and the loop: nothing of the hub goes on running."""
        self._door.close()
        self._call(self._end_links)
        if self.loop.running:
            self._call(self.clock.stop)
            self.loop.stop()

    def _call(self, fn: Callable[..., object], *args: object) -> None:
        """``fn(*args)`` on the loop's thread (at once if this is it, or if the loop does not run)."""
        if self.loop.in_loop() or not self.loop.running:
            fn(*args)
        else:
            self.loop.call_soon(fn, *args)

    # ---- the loop's thread -------------------------------------------------------------------------------------
    def _begin(self, attempt: int, answer: Answer) -> None:
        self._current = current = _Attempt(attempt, answer)
        gather = self._gathers.get(attempt)
        if gather is not None and gather.step is not None:
            current.deliver(gather.step)

    def _own_proposal(self, step: int | None) -> None:
        current = self._current
        if current is not None:
            current.make(step)
            self._proposal(0, current.number, step)

    def _end_links(self) -> None:
        self._closing = True  # the job is over: a link ending now decides nothing
        for link in list(self._links.values()):
            link.close()

    def _admit(self, conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes) -> None:
        node_rank = joiner.node_rank
        if not 0 < node_rank < self.nnodes:
            admit.refuse(conn, f"node {node_rank} is not one of 1..{self.nnodes - 1}")
            return
        welcome = handshake.welcome(self.key, self.run_id, server_nonce, joiner.nonce)
        to_task, from_task = handshake.session_keys(self.key, self.run_id, server_nonce, joiner.nonce)
        link = LoopLink(self.clock, conn, joiner.host, (to_task, from_task), pending=rest, greeting=welcome)
        link.on_line = partial(self._line, node_rank)
        link.on_end = partial(self._ended, node_rank)
        old, self._links[node_rank] = self._links.get(node_rank), link
        self._gone.discard(node_rank)
        with self._up_lock:
            self._up.add(node_rank)
        if old is not None:
            old.close()  # that task reconnected: its old connection is dead
        for attempt, gather in self._gathers.items():
            if gather.step is not None:
                link.send({"t": "stop_at", "attempt": attempt, "step": gather.step})  # after the welcome
        link.start()

    def _line(self, node_rank: int, link: LoopLink, payload: bytes) -> None:
        try:
            message = control(payload, TO_NODE0)
        except Malformed as exc:
            self.notes.append(f"node {node_rank}'s task sent a malformed message ({exc}): its link ended")
            link.refuse(str(exc))
            return
        self._proposal(node_rank, message["attempt"], message["step"])

    def _ended(self, node_rank: int, link: LoopLink) -> None:
        if self._links.get(node_rank) is not link:
            return  # a link that was replaced: its task is connected again
        self._gone.add(node_rank)
        with self._up_lock:
            self._up.discard(node_rank)
        if not self._closing:  # a task that is gone proposes nothing more
            for attempt, gather in self._gathers.items():
                if self._may_decide(gather):
                    self._decide(attempt)

    def _proposal(self, node_rank: int, attempt: int, step: int | None) -> None:
        gather = self._gathers.get(attempt)
        if gather is None:
            gather = self._gathers[attempt] = StopStepGather(frozenset(range(self.nnodes)))
            self.loop.call_later(GATHER_BOUND + 0.05, self._decide, attempt)
        if gather.step is not None:  # too late: the step stands
            link = self._links.get(node_rank)
            if link is not None:
                link.send({"t": "stop_at", "attempt": attempt, "step": gather.step})
            return
        gather.begin(time.monotonic())
        gather.propose(node_rank, step)
        if self._may_decide(gather):
            self._decide(attempt)

    def _may_decide(self, gather: StopStepGather) -> bool:
        """Whether ``gather.decide`` can answer now: every node proposed or ended (as few nodes counted, not which:
        a gather's check is as many set operations as nodes, once per proposal would be quadratic), or the bound."""
        if gather.step is not None or gather.since is None:
            return False
        ended_or_proposed = len(gather.proposals) + len(self._gone)
        return ended_or_proposed >= self.nnodes or time.monotonic() - gather.since >= GATHER_BOUND

    def _decide(self, attempt: int) -> None:
        step = self._gathers[attempt].decide(self._gone, time.monotonic())
        if step is None:
            return
        line = handshake.line({"t": "stop_at", "attempt": attempt, "step": step})
        for link in self._links.values():
            link.send_raw(line)  # a link that ended takes nothing
        current = self._current
        if current is not None and current.number == attempt:
            current.deliver(step)


class Spoke:
    """Another node's task: sends its node's proposal to node 0's and hands its agent node 0's answer."""

    def __init__(self, key: bytes, run_id: str, me: tuple[int, str], addresses: Sequence[tuple[str, int]]) -> None:
        """Connects in the background from now on (node 0's task may not listen yet), to each of ``addresses`` in
        turn (node 0's task listens on the first whose port it could bind: ``layout.stop_channel_ports``)."""
        self.notes: list[str] = []
        self._link: Link | None = None
        self._closed = threading.Event()
        self._current: _Attempt | None = None
        self._decided: dict[int, int] = {}  # node 0's answers, by attempt (one may come before this task began it)
        self._trying = True  # still trying to reach node 0's task: a proposal waits for the connection
        who: Who = (key, run_id, (me[0], me[1], 0), None)
        threading.Thread(target=self._connect, args=(who, tuple(addresses)), name="stop channel", daemon=True).start()

    @property
    def connected(self) -> bool:
        link = self._link
        return link is not None and not link.closed

    def wait_connected(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while not self.connected and time.monotonic() < end and not self._closed.is_set():
            time.sleep(0.01)
        return self.connected

    def begin(self, attempt: int, answer: Answer) -> None:
        self._current = current = _Attempt(attempt, answer)
        if attempt in self._decided:
            current.deliver(self._decided[attempt])

    def propose(self, step: int | None) -> None:
        current, link = self._current, self._link
        if current is None:
            return
        current.make(step)  # before the link is read: a connection made meanwhile sends it (_serve)
        sent = self._send(link, current) if link is not None else self._trying  # not connected yet: it waits
        if not sent:
            current.alone()
            return
        timer = threading.Timer(ANSWER_TIME, current.alone)
        timer.daemon = True
        timer.start()

    def close(self) -> None:
        self._closed.set()
        if self._link is not None:
            self._link.close()

    @staticmethod
    def _send(link: Link, current: _Attempt) -> bool:
        return link.send({"t": "propose", "attempt": current.number, "step": current.own})

    def _connect(self, who: Who, addresses: tuple[tuple[str, int], ...]) -> None:
        got = dial(addresses, who, time.monotonic() + CONNECT_TIME, names=NAMES, stopped=self._closed.is_set)
        if isinstance(got, Link):
            self._serve(got)
            return
        self._trying = False
        if got.kind == "no handshake":
            why = "the handshake did not complete"
        else:
            why = got.why or "no answer"
        host, port = addresses[0]
        others = ", ".join(str(p) for _h, p in addresses[1:])
        more = f", nor at its fallback ports {others}" if others else ""
        self.notes.append(f"cannot reach node 0's task at {host}:{port} ({why}){more}: this node decides alone")
        if self._current is not None:
            self._current.alone()

    def _serve(self, link: Link) -> None:
        link.start_reader()
        link.start_heartbeats()
        self._link = link
        self._trying = False
        if self._closed.is_set():
            link.close()
        current = self._current
        if current is not None and current.proposed and not current.answered:  # proposed before the connection
            self._send(link, current)
        for message in _checked(link, FROM_NODE0, self.notes, "node 0's task"):
            self._decided[message["attempt"]] = message["step"]
            current = self._current
            if current is not None and current.number == message["attempt"]:
                current.deliver(message["step"])
        current = self._current  # node 0's task is gone: a proposal waiting for it is answered here
        if current is not None:
            current.alone()


def _checked(link: Link, kinds: Kinds, notes: list[str], who: str) -> Iterator[dict[str, Any]]:
    """The messages ``link`` brings, each checked; a malformed one ends the link (noted)."""
    for line in link.received():
        try:
            yield control(line, kinds)
        except Malformed as exc:
            notes.append(f"{who} sent a malformed message ({exc}): its link ended")
            link.refuse(str(exc))
            return
