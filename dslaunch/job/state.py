"""The launcher's supervision decisions, without I/O (``job/loop.py`` feeds it and carries them out).

A :class:`JobState` is told each agent event, each agent stream's end, each signal dslaunch receives and the
time, and answers with actions: stop every node, kill them, pass a signal on, ask for stacks, print a line.
Once every agent's stream has closed, :meth:`JobState.tick` answers :class:`Finish` with the :class:`Outcome`:
one exit code and what caused it (as ``agent/node_state.py`` ends a node with its code).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.failure_bounds import cause_order
from dslaunch.job import hang
from dslaunch.job.stop_gather import StopStepGather
from dslaunch.plan import LaunchPlan
from dslaunch.wire import RankExit

KILL_GRACE = 3.0  # beyond --shutdown-timeout: how long the agents get to tear down before they are killed


@dataclass(frozen=True)
class StopAll:
    """Ask every agent to tear its node down; ``reason`` is for the launcher's log."""

    reason: str


@dataclass(frozen=True)
class StopAt:
    """Tell every agent the job's stop step (job/stop_gather.py)."""

    step: int


@dataclass(frozen=True)
class RequestStop:
    """Ask every agent for a requested stop by ``signum`` (each rank's main process now, the groups after
    --stop-grace); ``now``: end that grace at once."""

    signum: int
    now: bool = False


@dataclass(frozen=True)
class KillAll:
    """Hard-stop every agent's transport."""


@dataclass(frozen=True)
class Signal:
    """Pass ``signum`` on to every agent's ranks."""

    signum: int


@dataclass(frozen=True)
class RequestStacks:
    """Ask every agent for its ranks' stacks (``wire.STACKS_SIGNAL``); the job goes on (job/hang.py)."""


@dataclass(frozen=True)
class Say:
    """One line for dslaunch's stderr."""

    text: str


@dataclass(frozen=True)
class Outcome:
    """How the job ended: one exit code and what caused it."""

    code: int
    root_cause: RankExit | None = None
    lost_node: tuple[int, str, int | None] | None = None  # node_rank, host, status
    signal: int | None = None
    exits: tuple[RankExit, ...] = ()
    hang: hang.Hang | None = None  # --hang-timeout ended the job (exit hang.HANG_EXIT)
    lost_why: str = ""  # one job across pods: how the lost pod was lost (wire.NodeLost)
    stopped_by: int | None = None  # a requested stop by this signal ended the job (no rank failed first)
    stop_requested_at: float | None = None  # wall time of that request, as the earliest node saw it
    stop_signals: int = 0  # how many stop signals dslaunch itself received
    failed_after: float | None = None  # seconds from the attempt's start to its first rank's own failure


@dataclass(frozen=True)
class Finish:
    """Every agent's stream has closed: the job ended with ``outcome``."""

    outcome: Outcome


Action = StopAll | RequestStop | StopAt | KillAll | Signal | RequestStacks | Say | Finish


LOST_NODE_EXIT = 137  # a node lost with no status of its own (its connection dropped or went silent)


def lost_node_code(status: int | None) -> int:
    """The exit code for an agent that vanished with this status (Popen's -N: killed by signal N). Without one
    (a pod's link dropped or silent: a deleted pod, a dead node, a partition) 137, as if SIGKILLed: the code that a
    killed pod's own container gets, which Kubeflow's ExitCode policy and a podFailurePolicy rule can retry apart
    from a rank's own exit 1 (docs/kubernetes.md)."""
    if status is None:
        return LOST_NODE_EXIT
    if not status:
        return 1
    return 128 - status if status < 0 else status


class JobState:
    """Everything the launcher decides while it supervises one attempt; handles are known by their index."""

    def __init__(
        self,
        plan: LaunchPlan,
        nodes: Sequence[tuple[int, str]],
        *,
        decides_stop_step: bool = True,
        stop_nodes: frozenset[int] | None = None,
        started: float = 0.0,
    ) -> None:
        """``decides_stop_step``: this launcher answers the agents' stop steps (not a pod that is not the
        coordinator: the coordinator answers for every pod); ``stop_nodes``: the nodes whose proposals it waits for
        (default: its handles'; mpirun's one handle carries every node's); ``started``: the attempt's start, on the
        clock of every ``now`` given."""
        self.plan = plan
        self.started = started
        self.failed_at: float | None = None  # when the first rank that failed on its own was reported
        self.nodes = tuple(nodes)  # (node_rank, host) of each handle
        # the nodes of its own handles: a Slurm task supervises its node alone (each decides its step alone)
        expected = stop_nodes if stop_nodes is not None else frozenset(node_rank for node_rank, _host in self.nodes)
        self.watch = hang.HangWatch(plan, expected)  # a handle may carry several nodes (node_ranks)
        self.open_streams = len(self.nodes)
        self.done: dict[int, int] = {}  # handle index -> its agent's Done code
        self.finished: set[int] = set()  # node ranks
        self.exits: list[RankExit] = []
        self.root_cause: RankExit | None = None
        self.lost_node: tuple[int, str, int | None] | None = None
        self.lost_why = ""
        self.signal: int | None = None
        self.hang: hang.Hang | None = None
        self.stopping_since: float | None = None
        self.killed = False
        self.stop_request: int | None = None  # a requested stop's signal (ours, or one a node reported)
        self.in_grace = False  # a requested stop whose grace the agents still give
        self.requested_at: float | None = None  # the earliest node's wall time of the request
        self.stop_step = StopStepGather(expected) if decides_stop_step else None
        self.stop_signals = 0

    @property
    def stopping(self) -> bool:
        return self.stopping_since is not None

    def wants_status(self, index: int) -> bool:
        """Whether a stream's end needs its agent's exit status: it sent no Done, so it may be a lost node."""
        return index not in self.done

    def on_event(self, index: int, event: wire.Event, now: float) -> tuple[Action, ...]:
        if isinstance(event, RankExit):
            return self._on_exit(event, now)
        if isinstance(event, (wire.StopAsked, wire.StopStep)):
            return self._on_stop(event, now)
        if isinstance(event, (wire.Idle, wire.Stacks)):
            self.watch.on_event(event)
        elif isinstance(event, wire.NodeLost):  # one launcher per pod: the coordinator saw a pod go
            self.finished.add(event.node_rank)
            if self.root_cause is None and self.lost_node is None and self.signal is None:
                self.lost_node = (event.node_rank, event.host, event.status)
                self.lost_why = event.why
            return self._stop_all(now)
        elif isinstance(event, wire.Done):
            self.finished.add(event.node_rank)
            self.done[index] = self.done.get(index) or event.code  # a handle of several nodes: the first failure
            if event.stopped_by is not None:  # its StopAsked came first (a node that lost it: as if it had)
                return self._request(event.stopped_by, now)
            if event.code != 0:
                return self._stop_all(now)
        return ()

    def _on_exit(self, event: RankExit, now: float) -> tuple[Action, ...]:
        self.exits.append(event)
        if not event.failed or event.by_agent:
            return ()
        if self.failed_at is None:
            self.failed_at = now
        if self.root_cause is None or _order(event) < _order(self.root_cause):
            self.root_cause = event  # a rank that failed on its own before one whose peer went away
        return self._stop_all(now)

    def on_stream_end(self, index: int, status: int | None, now: float) -> tuple[Action, ...]:
        """Handle ``index``'s stream closed; ``status``: its agent's exit status when ``wants_status``."""
        self.open_streams -= 1
        node_rank, host = self.nodes[index]
        self.finished.add(node_rank)
        if index in self.done:
            return self._decide_stop_step(now)
        if self.root_cause is None and self.lost_node is None and self.signal is None:
            self.lost_node = (node_rank, host, status)
        return self._stop_all(now)

    def on_signal(self, signum: int, now: float) -> tuple[Action, ...]:
        """A signal to dslaunch; once every stream has closed the job is over, and a signal changes nothing."""
        if not self.open_streams:
            return ()
        if signum in wire.FORWARDED_SIGNALS and signum != self.plan.stop_signum:
            return (Signal(signum),)
        if signum == wire.STACKS_SIGNAL:
            return () if self.stopping else self._request_stacks()
        return self._stop_signal(signum, now)

    def _stop_signal(self, signum: int, now: float) -> tuple[Action, ...]:
        """SIGINT/SIGTERM/SIGHUP (and --stop-on-signal's) request a stop; a second one ends its grace, a third kills
        the agents (during a fail-fast teardown, the second does)."""
        self.stop_signals += 1
        if self.signal is None:
            self.signal = signum
            return self._request(signum, now)
        if self.in_grace:
            self.in_grace = False
            self.stopping_since = now  # the kill deadline runs from the groups' SIGTERM
            return (RequestStop(signum, now=True),)
        if not self.killed:
            self.killed = True
            return (KillAll(),)
        return ()

    def tick(self, now: float) -> tuple[Action, ...]:
        """What the passing of time decides: the end once every stream has closed, the kill deadline while
        stopping, else the hang watch."""
        if not self.open_streams:
            return (Finish(self.outcome()),)
        if self.stopping_since is None:
            return self._watch_hang(now)
        decided = self._decide_stop_step(now)
        if decided:
            return decided
        grace = self.plan.stop_grace if self.in_grace else 0.0
        if not self.killed and now - self.stopping_since > grace + self.plan.shutdown_timeout + KILL_GRACE:
            self.killed = True
            return (KillAll(),)
        return ()

    def outcome(self) -> Outcome:
        """How the job ends, as far as it is known now (``Finish`` carries it at the end)."""
        stopped_by = self.stop_request if self.root_cause is None and self.hang is None else None
        return Outcome(
            self._code(),
            self.root_cause,
            self.lost_node,
            self.signal,
            tuple(self.exits),
            self.hang,
            self.lost_why,
            stopped_by,
            self.requested_at if stopped_by is not None else None,
            self.stop_signals,
            failed_after=None if self.failed_at is None else self.failed_at - self.started,
        )

    def _watch_hang(self, now: float) -> tuple[Action, ...]:
        actions: list[Action] = []
        if self.watch.hung(self.finished):
            self.watch.declare(now)
            actions.append(Say(hang.declared_line(self.plan)))
            if hang.stacks_line(self.plan) is None:
                actions.append(RequestStacks())
        if self.watch.asked_at is not None and self.watch.settled(self.finished, now):
            self.hang = self.watch.result(self.finished)
            actions.extend(self._stop_all(now))
        return tuple(actions)

    def _request_stacks(self) -> tuple[Action, ...]:
        refused = hang.stacks_line(self.plan)
        return (Say(refused),) if refused is not None else (RequestStacks(),)

    def _request(self, signum: int, now: float) -> tuple[Action, ...]:
        """A requested stop, unless the job is already stopping (a fail-fast teardown, or a request before)."""
        if self.stopping_since is not None:
            return ()
        self.stopping_since = now
        self.stop_request, self.in_grace = signum, self.plan.stop_grace > 0
        if self.stop_step is not None:
            self.stop_step.begin(now)
        return (RequestStop(signum),)

    def _stop_all(self, now: float) -> tuple[Action, ...]:
        if self.stopping_since is not None:
            return ()
        self.stopping_since = now
        return (StopAll(self._reason()),)

    def _on_stop(self, event: wire.StopAsked | wire.StopStep, now: float) -> tuple[Action, ...]:
        """A node was asked to stop: every node is (a pod's SIGTERM); or a node's stop step proposal (its
        ``StopAsked`` came first and asked every node)."""
        if isinstance(event, wire.StopAsked):
            if self.requested_at is None or event.ts < self.requested_at:
                self.requested_at = event.ts
            return self._request(event.signum, now)
        if self.stop_step is None:
            return ()
        self.stop_step.begin(now)  # also after a failure's teardown began: that agent waits for an answer
        self.stop_step.propose(event.node_rank, event.step)
        return self._decide_stop_step(now)

    def _decide_stop_step(self, now: float) -> tuple[Action, ...]:
        step = self.stop_step.decide(self.finished, now) if self.stop_step is not None else None
        return () if step is None else (StopAt(step),)

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
        if self.stop_request is not None and self.root_cause is None and self.hang is None:
            stop_code = self.plan.stop_exit_code
            return 128 + self.stop_request if stop_code is None else stop_code
        if self.signal is not None:
            return 128 + self.signal
        if self.hang is not None:
            return hang.HANG_EXIT
        if self.root_cause is not None:
            return self.root_cause.code
        if self.lost_node is not None:
            return lost_node_code(self.lost_node[2])
        return next((code for code in self.done.values() if code), 0)


def _order(event: wire.RankExit) -> tuple[bool, float]:
    return cause_order(event.error, event.stderr_tail, event.ts)
