"""An attempt's member pods as the coordinator's ONE handle in ``job/loop.py`` (as mpirun's one handle carries
every node's stream, ``job/protocols.nodes_of``): one reader thread in ``supervise`` for every pod, however many.

The coordinator's loop (``channel/event_loop.py``) reads each pod's link and puts its lines, and its end, in one queue;
:meth:`AttemptPods.lines` checks each (``pods/messages.py``) and passes the pods' events on, each with its own node
rank: a rank exit goes to every other pod at once, a pod's ``Done`` says that node ended, and a pod that is lost
(its connection dropped, went silent, failed its MAC, sent a malformed or oversized line, or did not read what it
was sent) becomes a ``NodeLost`` for the job and for every other pod. Stop, stop step and stacks requests go to
every pod, each one sealed send per link on the loop's thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from dslaunch import wire
from dslaunch.channel import handshake
from dslaunch.channel.event_loop import Loop
from dslaunch.channel.link import SILENT
from dslaunch.channel.loop_link import LoopLink
from dslaunch.pods import messages
from dslaunch.wire_check import Malformed

Relay = Callable[[wire.Event, int], None]  # an event to every pod of the attempt but one node rank's
# Failed ranks and lost pods relayed to every pod in one attempt: enough for each pod's root cause (job/state.py
# orders failures, a rank that failed on its own before one whose peer went away); past it, a job-wide failure
# (every rank's NCCL timeout, thousands of pods cut off) would cost N x 8 x (N - 1) sealed lines (2 billion at
# 16,384 pods). docs/scale.md.
MAX_RELAYED_FAILURES = 32


class Pod:
    """One member pod in the attempt."""

    __slots__ = ("failed_rank", "host", "link", "node_rank", "over", "ranks")

    def __init__(self, node_rank: int, host: str, link: LoopLink) -> None:
        self.node_rank = node_rank
        self.host = host
        self.link = link
        self.ranks: frozenset[int] | None = None  # its ranks in the attempt, once laid out: it speaks for no other
        self.over = False  # it sent its Done, or was lost: nothing more from it counts
        self.failed_rank = False


class AttemptPods:
    """The attempt's member pods, by node rank, as one ``AgentHandle`` (``job/protocols.py``)."""

    def __init__(self, loop: Loop, relay: Relay, pods: list[Pod]) -> None:
        """``loop``: the coordinator's, which serves every pod's link; ``relay``: the coordinator's."""
        self.loop = loop
        self.relay = relay
        self.pods = pods
        self.node_ranks = tuple(pod.node_rank for pod in pods)  # job/protocols.nodes_of
        self.node_rank = pods[0].node_rank if pods else -1
        self.host = pods[0].host if len(pods) == 1 else f"{len(pods)} pods"
        self._inbox: queue.SimpleQueue[tuple[int, bytes | None]] = queue.SimpleQueue()
        self._left = len(pods)
        self._ended = threading.Event()
        self._asked_to_stop = False
        self._failures_relayed = 0  # the loop's thread

    def __iter__(self) -> Iterator[Pod]:
        return iter(self.pods)

    def __len__(self) -> int:
        return len(self.pods)

    # ---- the loop's thread -------------------------------------------------------------------------------------
    def attach(self, held: dict[LoopLink, list[bytes]]) -> None:
        """From now on each pod's lines and end come here (``held``: lines a pod sent before its start)."""
        put = self._inbox.put
        for index, pod in enumerate(self.pods):
            link = pod.link
            for payload in held.pop(link, ()):
                put((index, payload))
            link.on_line, link.on_end = _Route(put, index).line, _Route(put, index).end
            if link.closed:
                put((index, None))

    def pass_on(self, event: wire.Event, source: int) -> None:
        """``event`` of node ``source`` to every other pod, if it changes what they do: a lost pod, and a rank that
        failed on its own (the attempt's first ``MAX_RELAYED_FAILURES`` of the two). A rank that exited 0 or that
        its agent stopped changes no pod's decision (``JobState._on_exit``), and relaying every one made an
        attempt's end O(pods^2): each pod's summary counts its own ranks' exits, the coordinator's the job's."""
        if isinstance(event, wire.RankExit) and (not event.failed or event.by_agent):
            return
        if self._failures_relayed >= MAX_RELAYED_FAILURES:
            return  # the job stops on the first: thousands of pods lost at once cost no O(pods^2) storm either
        self._failures_relayed += 1
        self.send_all(messages.encoded(event), source)

    def send_all(self, data: bytes, source: int = -1) -> None:
        """``data`` (whole lines) to every pod but ``source``'s (a node rank)."""
        for pod in self.pods:
            if pod.node_rank != source:
                pod.link.send_raw(data)

    def _close_all(self) -> None:
        for pod in self.pods:
            pod.link.close()

    # ---- supervise's reader thread -----------------------------------------------------------------------------
    def lines(self) -> Iterator[str | wire.Event]:
        try:
            while self._left:
                index, payload = self._inbox.get()
                pod = self.pods[index]
                if not pod.over:
                    yield from self._take(pod, payload)
        finally:
            self._ended.set()

    def _take(self, pod: Pod, payload: bytes | None) -> list[wire.Event]:
        """What a pod's line (None: its link's end) means for the job: the events checked, none encoded again."""
        if payload is None:
            return self._lost(pod, lost_why(pod.link.why, "its launcher", pod.link.detail))
        line = payload.decode("utf-8", "replace") + "\n"
        try:
            event = messages.from_pod(line, pod.node_rank, pod.ranks)
        except Malformed as exc:  # the pod is lost, with why; nothing it said is acted on
            messages.note(str(exc), pod.host)
            self.loop.call_soon(pod.link.refuse, str(exc))
            return self._lost(pod, lost_why("malformed", "its launcher", str(exc)))
        if isinstance(event, wire.RankExit):
            pod.failed_rank |= event.failed and not event.by_agent
            self.relay(event, pod.node_rank)
        elif isinstance(event, wire.Done):
            self._over(pod)
            left = left_by_signal(event, pod.failed_rank or self._asked_to_stop, pod.host)
            if left is None:
                return [event]
            self.relay(left, pod.node_rank)
            return [left, event]
        return [event]  # one of messages.POD_EVENTS, as checked

    def _lost(self, pod: Pod, why: str) -> list[wire.Event]:
        self._over(pod)
        lost = wire.NodeLost(pod.node_rank, pod.host, None, why)
        self.relay(lost, pod.node_rank)
        return [lost]

    def _over(self, pod: Pod) -> None:
        pod.over = True
        self._left -= 1

    # ---- the job loop's thread (supervise) ---------------------------------------------------------------------
    def _broadcast(self, obj: dict[str, Any]) -> None:
        self.loop.call_soon(self.send_all, handshake.line(obj))

    def stop(self) -> None:
        if not self._asked_to_stop:
            self._asked_to_stop = True
            self._broadcast({"t": "stop"})

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        if not self._asked_to_stop or now:
            self._asked_to_stop = True
            self._broadcast({"t": "stop", "signum": int(signum), "now": now})

    def stop_at(self, step: int) -> None:
        self._broadcast({"t": "stop_at", "step": int(step)})

    def signal(self, signum: int) -> None:
        if signum == wire.STACKS_SIGNAL:  # the hang watch's request; users' signals stay on the pod they reach
            self._broadcast({"t": "signal", "signum": int(signum)})

    def kill(self) -> None:
        self.loop.call_soon(self._close_all)

    def wait(self, timeout: float | None) -> int | None:
        return 0 if self._ended.wait(timeout) else None


class _Route:
    """A pod's lines and end, into the attempt's one queue with its index."""

    __slots__ = ("index", "put")

    def __init__(self, put: Callable[[tuple[int, bytes | None]], None], index: int) -> None:
        self.put, self.index = put, index

    def line(self, _link: LoopLink, payload: bytes) -> None:
        self.put((self.index, payload))

    def end(self, _link: LoopLink) -> None:
        self.put((self.index, None))


def left_by_signal(done: wire.Done, explained: bool, host: str) -> wire.NodeLost | None:
    """A pod that ended with 128+N, no failed rank and no stop asked of it: its launcher got signal N (a requested
    stop is no loss: its ``StopAsked`` stopped every pod)."""
    if explained or done.code <= 128 or done.stopped_by is not None:
        return None
    signum = done.code - 128
    name = wire.exit_code_of(-signum)[1] or f"signal {signum}"
    return wire.NodeLost(done.node_rank, host, -signum, f"its launcher received {name}")


def lost_why(how: str, who: str, detail: str = "", silence: float = SILENT) -> str:
    """Words for how a link ended (``Link.why``, ``LoopLink.why``; ``detail``: with "malformed", what was wrong;
    ``silence``: how long ``who`` could say nothing)."""
    if how == "malformed":
        return f"{who} sent a malformed message ({detail})"
    if how == "forged":
        return f"a message on {who}'s connection failed its MAC (altered, replayed, reordered or injected?)"
    if how == "silent":
        return f"nothing heard from {who} for {silence:g} s (powered off or cut off from the network?)"
    if how == "oversized":
        return f"{who} sent a message over the size limit"
    if how == "stalled":
        return f"{who} did not read what it was sent (its connection was ended)"
    return f"{who}'s connection dropped"
