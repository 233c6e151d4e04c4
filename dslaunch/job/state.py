"""The launcher's supervision decisions, without I/O (``job/loop.py`` feeds it and carries them out).

A :class:`JobState` is told each agent event, each agent stream's end, each signal dslaunch receives and the
time, and answers with actions: stop every node, kill them, forward a signal, ask for stacks, print a line.
At the end, :meth:`JobState.outcome` says how the job ended: one exit code and what caused it.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.job import hang
from dslaunch.plan import LaunchPlan
from dslaunch.wire import RankExit

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # teardown, exit 128+N; a second one kills
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)
STACKS = signal.SIGQUIT  # every rank prints its stack; the job goes on (job/hang.py)
KILL_GRACE = 3.0  # beyond --shutdown-timeout: how long the agents get to tear down before they are killed


@dataclass(frozen=True)
class StopAll:
    """Ask every agent to tear its node down; ``reason`` is for the launcher's log."""

    reason: str


@dataclass(frozen=True)
class KillAll:
    """Hard-stop every agent's transport."""


@dataclass(frozen=True)
class Forward:
    """Pass ``signum`` on to every agent's ranks."""

    signum: int


@dataclass(frozen=True)
class AskStacks:
    """Ask every agent for its ranks' stacks (SIGQUIT)."""


@dataclass(frozen=True)
class Say:
    """One line for dslaunch's stderr."""

    text: str


Action = StopAll | KillAll | Forward | AskStacks | Say


@dataclass(frozen=True)
class Outcome:
    code: int
    root_cause: RankExit | None = None
    lost_node: tuple[int, str, int | None] | None = None  # node_rank, host, status
    signal: int | None = None
    exits: tuple[RankExit, ...] = ()
    hang: hang.Hang | None = None  # --hang-timeout ended the job (exit hang.HANG_EXIT)


def lost_node_code(status: int | None) -> int:
    """The exit code for an agent that vanished with this status (Popen's -N: killed by signal N)."""
    if not status:
        return 1
    return 128 - status if status < 0 else status


class JobState:
    """Everything the launcher decides while it supervises one attempt; handles are known by their index."""

    def __init__(self, plan: LaunchPlan, nodes: Sequence[tuple[int, str]]) -> None:
        self.plan = plan
        self.nodes = tuple(nodes)  # (node_rank, host) of each handle
        self.watch = hang.HangWatch(plan, [node_rank for node_rank, _host in self.nodes])
        self.open_streams = len(self.nodes)
        self.done: dict[int, int] = {}  # handle index -> its agent's Done code
        self.finished: set[int] = set()  # node ranks
        self.exits: list[RankExit] = []
        self.root_cause: RankExit | None = None
        self.lost_node: tuple[int, str, int | None] | None = None
        self.signal: int | None = None
        self.hang: hang.Hang | None = None
        self.stopping_since: float | None = None
        self.killed = False

    @property
    def streams_open(self) -> bool:
        return self.open_streams > 0

    @property
    def stopping(self) -> bool:
        return self.stopping_since is not None

    def wants_status(self, index: int) -> bool:
        """Whether a stream's end needs its agent's exit status: it sent no Done, so it may be a lost node."""
        return index not in self.done

    def on_event(self, index: int, event: wire.Event, now: float) -> tuple[Action, ...]:
        if isinstance(event, RankExit):
            self.exits.append(event)
            if not event.failed or event.by_agent:
                return ()
            if self.root_cause is None or event.ts < self.root_cause.ts:
                self.root_cause = event
            return self._stop_all(now)
        if isinstance(event, (wire.Idle, wire.Stacks)):
            self.watch.on_event(event)
        elif isinstance(event, wire.Done):
            self.finished.add(event.node_rank)
            self.done[index] = event.code
            if event.code != 0:
                return self._stop_all(now)
        return ()

    def on_stream_end(self, index: int, status: int | None, now: float) -> tuple[Action, ...]:
        """Handle ``index``'s stream closed; ``status``: its agent's exit status when ``wants_status``."""
        self.open_streams -= 1
        node_rank, host = self.nodes[index]
        self.finished.add(node_rank)
        if index in self.done:
            return ()
        if self.root_cause is None and self.lost_node is None and self.signal is None:
            self.lost_node = (node_rank, host, status)
        return self._stop_all(now)

    def on_signal(self, signum: int, now: float) -> tuple[Action, ...]:
        if signum in FORWARDED:
            return (Forward(signum),)
        if signum == STACKS:
            return () if self.stopping else self._ask_stacks()
        kill: tuple[Action, ...] = ()
        if self.signal is not None and not self.killed:
            self.killed = True  # a second Ctrl-C: stop waiting for the grace period
            kill = (KillAll(),)
        if self.signal is None:
            self.signal = signum
        return (*kill, *self._stop_all(now))

    def tick(self, now: float) -> tuple[Action, ...]:
        """What the passing of time decides: the kill deadline while stopping, else the hang watch."""
        if self.stopping_since is None:
            return self._watch_hang(now)
        if not self.killed and now - self.stopping_since > self.plan.shutdown_timeout + KILL_GRACE:
            self.killed = True
            return (KillAll(),)
        return ()

    def outcome(self) -> Outcome:
        return Outcome(self._code(), self.root_cause, self.lost_node, self.signal, tuple(self.exits), self.hang)

    def _watch_hang(self, now: float) -> tuple[Action, ...]:
        actions: list[Action] = []
        if self.watch.hung(self.finished):
            self.watch.declare(now)
            actions.append(Say(hang.declared_line(self.plan)))
            if hang.stacks_line(self.plan) is None:
                actions.append(AskStacks())
        if self.watch.asked_at is not None and self.watch.settled(self.finished, now):
            self.hang = self.watch.result(self.finished)
            actions.extend(self._stop_all(now))
        return tuple(actions)

    def _ask_stacks(self) -> tuple[Action, ...]:
        refused = hang.stacks_line(self.plan)
        return (Say(refused),) if refused is not None else (AskStacks(),)

    def _stop_all(self, now: float) -> tuple[Action, ...]:
        if self.stopping_since is not None:
            return ()
        self.stopping_since = now
        return (StopAll(self._reason()),)

    def _reason(self) -> str:
        if self.hang is not None:
            return "hang"
        if self.root_cause is not None:
            return f"rank {self.root_cause.rank} on {self.root_cause.host} failed"
        if self.signal is not None:
            return f"signal {signal.Signals(self.signal).name}"
        if self.lost_node is not None:
            return f"lost node {self.lost_node[0]}"
        return "a node agent failed"

    def _code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        if self.hang is not None:
            return hang.HANG_EXIT
        if self.root_cause is not None:
            return self.root_cause.code
        if self.lost_node is not None:
            return lost_node_code(self.lost_node[2])
        return next((code for code in self.done.values() if code), 0)
