"""Every other pod's side of the control channel: join the coordinator for an attempt, and the handles that
connect this pod's agent to the rest of the job.

:func:`join` dials the coordinator (``channel/dial.py``: retrying while its pod is not up yet, proving the job's
secret, checking the coordinator's proof), and waits for the attempt's start. :class:`CoordinatorLink` is the
coordinator as a handle in ``job/loop.py``: the other pods' rank exits and losses come in on it, and its stop and
stacks requests go to this pod's agent. :class:`Forwarding` wraps the local agent's handle to send its events to the
coordinator.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.channel.dial import dial
from dslaunch.channel.link import Link, server_silent
from dslaunch.job.protocols import AgentHandle
from dslaunch.pods import messages
from dslaunch.wire_check import Malformed

# What the coordinator may send before the attempt starts (pods/messages.py checks each field)
_BEFORE_START = {k: messages.FROM_COORDINATOR[k] for k in ("start", "standby", "end", "refused")}


@dataclass(frozen=True)
class Joined:
    link: Link
    lines: Iterator[str]
    attempt: int
    node_rank: int  # this pod's in the attempt (an elastic job's coordinator assigns it)
    hosts: tuple[str, ...]  # the hosts the coordinator named, by node rank: its own alone since issue 54
    nnodes: int  # the attempt's pods

    @property
    def host(self) -> str:
        """The coordinator's host name, as its own summaries name it."""
        return self.hosts[0]

    def every_host(self, own: str) -> tuple[str, ...]:
        """Every node's host by node rank, for an elastic attempt's layout: the coordinator's, this pod's (``own``),
        ``podN`` for the others (their events name their own hosts)."""
        named = self.hosts
        count = max(self.nnodes, len(named))
        return tuple(named[i] if i < len(named) else own if i == self.node_rank else f"pod{i}" for i in range(count))


@dataclass(frozen=True)
class Orphaned:
    """The coordinator went while this pod stood by: it joins again (a recreated or another coordinator)."""

    why: str


@dataclass(frozen=True)
class Ended:
    """The job ended while this pod waited (a standby): it exits with the job's code."""

    code: int


def join(
    address: tuple[str, int],
    key: bytes,
    run_id: str,
    me: tuple[int, str, int],
    *,
    deadline: float,
    stopped: list[int],
    shape: Mapping[str, str] | None = None,
    pods: int = 1,
) -> Joined | Ended | Orphaned | str:
    """This pod (``me``: node rank, host, last attempt taken part in; ``shape``: what it was given that every pod
    must agree on, pods/shape.py) in the coordinator's next attempt, or why not. ``pods``: the job's pods at most,
    which sets how often the coordinator beats (``link.server_silent``)."""
    got = dial([address], (key, run_id, me, shape), deadline, stopped=lambda: bool(stopped))
    if isinstance(got, Link):
        got.allow_silence(server_silent(pods))
        return _wait_for_start(got, deadline, stopped)
    if stopped:
        return "stopped by a signal while joining"
    where = f"the coordinator at {address[0]}:{address[1]}"
    if got.kind == "refused":
        return got.why
    if got.kind == "no handshake":
        return f"{where} accepted the connection but did not complete the handshake (not a dslaunch coordinator?)"
    return f"{where} did not answer ({got.why})" if got.why else f"{where} did not answer"


def _wait_for_start(link: Link, deadline: float, stopped: list[int]) -> Joined | Ended | Orphaned | str:
    """Wait for the start (a standby waits on, past the join deadline), the job's end, or a refusal."""
    link.start_heartbeats()
    lines = link.lines()
    waiting = _Wait(deadline)
    threading.Thread(target=_close_unless, args=(link, waiting, stopped), daemon=True).start()
    for line in lines:
        try:
            message = messages.control(line, _BEFORE_START)
        except Malformed as exc:
            messages.note(str(exc), link.peer)
            link.refuse(str(exc))
            break
        kind = message["t"]
        if kind == "start":
            waiting.started.set()
            hosts = tuple(message["hosts"]) or (link.peer,)
            nnodes = message.get("nnodes", len(hosts))
            return Joined(link, lines, message["attempt"], message["node_rank"], hosts, nnodes)
        if kind == "standby" and waiting.deadline != float("inf"):
            waiting.deadline = float("inf")
            _say(
                f"dslaunch: this pod stands by: attempt {message['attempt'] + 1} runs on "
                f"{message['nnodes']} pods; it waits, connected, to replace one that is lost"
            )
        if kind == "end":
            link.close()
            return Ended(message["code"])
        if kind == "refused":
            link.close()
            return f"the coordinator ended the job before it started: {message.get('why')}"
    return _no_start(link, waiting, stopped)


def _no_start(link: Link, waiting: _Wait, stopped: list[int]) -> Orphaned | str:
    """Why the wait for the start ended without one."""
    if stopped:
        return "stopped by a signal while waiting for the other pods"
    if link.why == "malformed":
        return f"the coordinator sent a malformed message ({link.detail})"
    if waiting.deadline == float("inf"):
        return Orphaned(f"the coordinator's connection ended ({link.why}) while this pod stood by")
    if time.monotonic() >= waiting.deadline:
        return "the other pods did not all join in time"
    return f"the coordinator's connection ended ({link.why})"


class _Wait:
    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.started = threading.Event()


def _close_unless(link: Link, waiting: _Wait, stopped: list[int]) -> None:
    """End the wait for the start at the join deadline or a signal (the reader is blocked in recv)."""
    while not waiting.started.wait(0.05):
        if link.closed:
            return
        if stopped or time.monotonic() >= waiting.deadline:
            link.close()
            return


def _say(text: str) -> None:
    from dslaunch.output.sink import STALL, write_within

    write_within(2, (text + "\n").encode(), STALL)


class CoordinatorLink(AgentHandle):
    """The coordinator as seen from another pod, for one attempt (an ``AgentHandle``)."""

    def __init__(self, joined: Joined, local: AgentHandle) -> None:
        self.node_rank = 0  # the coordinator's
        self.host = joined.host
        self.link = joined.link
        self.local = local
        self.verdict: tuple[int, bool] | None = None  # the job's exit code, and whether no attempt follows
        self.cause = ""  # the coordinator's words for what ended the attempt
        self._lines = joined.lines
        self._ended = threading.Event()

    def lines(self) -> Iterator[str]:
        try:
            for line in self._lines:
                try:
                    message = messages.from_coordinator(line, self.local.node_rank)
                except Malformed as exc:  # the coordinator is lost, with why
                    messages.note(str(exc), self.host)
                    self.link.refuse(str(exc))
                    break
                if isinstance(message, (wire.RankExit, wire.NodeLost)):
                    yield wire.encode(message)
                    continue
                if message["t"] == "stop" and type(message.get("signum")) is int:  # a requested stop
                    self.local.request_stop(message["signum"], now=bool(message.get("now")))
                elif message["t"] == "stop":
                    self.local.stop()
                elif message["t"] == "stop_at":
                    self.local.stop_at(message["step"])
                elif message["t"] == "signal" and message["signum"] == int(wire.STACKS_SIGNAL):
                    self.local.signal(wire.STACKS_SIGNAL)
                elif message["t"] == "end":
                    self.verdict = (message["code"], message["last"])
                    self.cause = message.get("cause", "")
                    self.link.close()
                    yield wire.encode(wire.Done(self.node_rank, 0))
                    return
            from dslaunch.pods.attempt import lost_why

            why = lost_why(self.link.why, "the coordinator", self.link.detail, self.link.silence)
            yield wire.encode(wire.NodeLost(0, self.host, None, why))
        finally:
            self._ended.set()

    def stop(self) -> None:
        """Nothing to send: the coordinator learns why this pod stops from its agent's events."""

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        """Nothing to send: the coordinator learns of it from this pod's agent (``wire.StopAsked``) and asks every
        pod; a second signal's end of the grace stays on this pod."""

    def stop_at(self, step: int) -> None:
        """Only the coordinator decides the job's stop step (its ``stop_at`` message)."""

    def signal(self, signum: int) -> None:
        """A signal to this pod's launcher reaches this pod's ranks only (``Forwarding`` passes it on)."""

    def kill(self) -> None:
        self.link.close()

    def wait(self, timeout: float | None) -> int | None:
        return 0 if self._ended.wait(timeout) else None


# A pod's events the coordinator acts on besides rank exits and the end (Spawned: it counts the job's ranks alive)
_TO_COORDINATOR = (wire.Spawned, wire.Idle, wire.Stacks, wire.StopAsked, wire.StopStep)


class Forwarding(AgentHandle):
    """A local agent's handle that also sends each of its events on (to the coordinator, or from it to the pods)."""

    def __init__(self, agent: AgentHandle, send: Callable[[wire.Event], object], *, to_coordinator: bool) -> None:
        """``to_coordinator``: a pod's agent, whose events all go to the coordinator; else the coordinator's own,
        whose rank exits go to every pod (and its Done, kept home, to them as a lost pod if a signal ended it)."""
        self.agent = agent
        self.node_rank = agent.node_rank
        self.host = agent.host
        self.send = send
        self.to_coordinator = to_coordinator
        self.asked_to_stop = False
        self.failed_rank = False

    def lines(self) -> Iterator[str | wire.Event]:
        from dslaunch.pods.attempt import left_by_signal

        for line in self.agent.lines():
            event = wire.decode(line) if isinstance(line, str) else line
            if isinstance(event, wire.RankExit):
                self.failed_rank |= event.failed and not event.by_agent
                self.send(event)
            elif isinstance(event, _TO_COORDINATOR) and self.to_coordinator:
                self.send(event)
            elif isinstance(event, (wire.NodeWindows, wire.TimerWindow)) and self.to_coordinator:
                self.send(event)
                continue  # the coordinator sees the job's windows, not each pod alone (docs/observability.md)
            elif isinstance(event, wire.Done):
                if self.to_coordinator:
                    self.send(event)
                else:
                    left = left_by_signal(event, self.failed_rank or self.asked_to_stop, self.host)
                    if left is not None:
                        self.send(left)
            yield line

    def stop(self) -> None:
        self.asked_to_stop = True
        self.agent.stop()

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        self.agent.request_stop(signum, now=now)

    def stop_at(self, step: int) -> None:
        self.agent.stop_at(step)

    def signal(self, signum: int) -> None:
        self.agent.signal(signum)

    def kill(self) -> None:
        self.agent.kill()

    def wait(self, timeout: float | None) -> int | None:
        return self.agent.wait(timeout)
