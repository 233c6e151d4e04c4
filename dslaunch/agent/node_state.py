"""What one node's agent decides, without I/O: the node's root cause, the teardown, the exit code, when it is done.

The I/O shell (``agent/node_loop.py``) owns the processes, pipes, sinks and clocks. It tells
:class:`NodeState` what happened (a rank started, exited, could not start; a signal; a control
command; output read; a moment passed) with the times as arguments, and executes the actions it gets
back, in order. The first rank that fails on its own is the root cause: every other live rank's process
group gets SIGTERM once, SIGKILL when ``shutdown_timeout`` has passed (so does a launcher's ``stop``). A requested
stop (control ``stop SIGNAME``, the launcher gone, a stop signal to the agent) signals each rank's main process
only, its group after --stop-grace (docs/stopping.md); the node ends with 128+N unless a rank failed first.
Once the node is done, :meth:`NodeState.tick` answers :class:`Finish` with its exit
code (as ``job/state.py`` ends a job with its outcome).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dslaunch import wire
from dslaunch.agent.failures import ErrorRecord
from dslaunch.agent.rank_exits import DeathWindow, RankId, cannot_start, rank_exit
from dslaunch.failure_bounds import cause_order
from dslaunch.output.sink import STALL

if TYPE_CHECKING:
    from dslaunch.plan import LaunchPlan

HELD_OPEN = 0.5  # ranks gone, pipes silent this long (a grandchild holds them): stop reading
DRAIN_POLL = 0.1  # ranks gone: how often to look at the pipes and sinks at the least
KILL_REPEAT = 0.05  # past the deadline: SIGKILL again this often until every rank is reaped
# Signals this close to a stop's request are that request again: a dying launcher's parent-death SIGTERM comes once
# per thread it had, before its forked agent sees its parent change; a person's second Ctrl-C comes later.
SAME_STOP = 0.25
SETTLE = 0.002  # from a stop page's pending mark to the node's proposal: a count written before a rank saw the mark
# is visible by then (agent/stop_pages.py)


# ---- actions: what the shell is to do, in the order given ----------------------------------------------------
@dataclass(frozen=True)
class Emit:
    """Send this event to the launcher."""

    event: wire.Event


@dataclass(frozen=True)
class Exited:
    """Send this rank's exit to the launcher and record it in the launch timeline."""

    result: wire.RankExit


@dataclass(frozen=True)
class Signal:
    """Send ``signum`` to each of these ranks' sessions."""

    ranks: tuple[int, ...]
    signum: int


@dataclass(frozen=True)
class StopRequested:
    """A requested stop: mark it (with ``deadline``, the wall time the groups get SIGTERM) in every rank's stop
    page, and send ``signum`` to each of these ranks' main process only, but to none that takes part in
    ``should_stop()`` (agent/stop_pages.py)."""

    ranks: tuple[int, ...]
    signum: int
    deadline: float


@dataclass(frozen=True)
class ProposeStep:
    """``SETTLE`` after a requested stop: send this node's stop step to the launcher (``wire.StopStep``); ``alone``:
    no launcher will answer (none, or gone): write it as the job's step too."""

    alone: bool


@dataclass(frozen=True)
class SetStopStep:
    """The launcher's answer: the job's stop step, for every rank's page."""

    step: int


@dataclass(frozen=True)
class Stopping:
    """The teardown has begun (logged once); ``grace``: a requested stop's seconds before the groups' SIGTERM."""

    signum: int
    grace: float | None = None


@dataclass(frozen=True)
class RequestStacks:
    """Every live rank prints its stack (agent/watch.py); the job goes on."""


@dataclass(frozen=True)
class AbandonStalledReaders:
    """Stopping: give up on an output reader that takes nothing for ``STALL`` seconds."""


@dataclass(frozen=True)
class StopReading:
    """The ranks are gone and something holds their pipes open: kill what is left of them, close every pipe."""


@dataclass(frozen=True)
class Finish:
    """Every rank is reaped, every pipe closed, every sink idle: the node ends with ``code``."""

    code: int


StopStepAction = ProposeStep | SetStopStep
Action = (
    Emit
    | Exited
    | Signal
    | StopRequested
    | StopStepAction
    | Stopping
    | RequestStacks
    | AbandonStalledReaders
    | StopReading
    | Finish
)


class Pipes(Protocol):
    """The shell's pipes and sinks, as far as the decisions need them (read only when needed)."""

    @property
    def open(self) -> bool:
        """A rank's pipe is still open."""

    @property
    def reading_all(self) -> bool:
        """No pipe is paused for a full sink."""

    @property
    def drained(self) -> bool:
        """Every sink has written everything."""


# ---- the node ----------------------------------------------------------------------------------------------
@dataclass
class _RankStatus:
    """What the decisions keep of a started rank: who it is, when we signalled it, how it ended."""

    who: RankId
    signalled_at: float | None = None  # wall time of our stop signal (or a requested stop)
    returncode: int | None = None
    group_signalled: bool = False  # its process group got the teardown's SIGTERM


class NodeState:
    """One node's ranks and what to do next. ``now``: monotonic seconds; ``wall``: ``time.time()``."""

    def __init__(
        self,
        node_rank: int,
        host: str,
        *,
        shutdown_timeout: float,
        slurm_signals_ranks: bool,
        now: float,
        stop_grace: float = 0.0,
        stop_on: int | None = None,
    ) -> None:
        self.node_rank = node_rank
        self.host = host
        self.shutdown_timeout = shutdown_timeout
        self.slurm_signals_ranks = slurm_signals_ranks  # Slurm already signals every rank: forward nothing
        self.stop_grace = stop_grace
        self.stop_on = stop_on  # --stop-on-signal's signal: a stop request, not forwarded
        self.ranks: dict[int, _RankStatus] = {}  # in start order
        self.root_cause: wire.RankExit | None = None
        self.stop_signal: int | None = None
        self.requested_at: float | None = None  # wall time of a requested stop (None: none, or fail-fast first)
        self.grace_deadline: float | None = None  # monotonic: the groups' SIGTERM of a requested stop
        self.stop_deadline: float | None = None  # monotonic: SIGKILL, once the groups have had SIGTERM
        self.ranks_done_at: float | None = None
        self.last_read = now
        self.launcher_answers = True  # a launcher can answer this node's stop step (False: none, or it is gone)
        self.propose_at: float | None = None  # monotonic: when to propose this node's stop step (docs/stopping.md)
        self.proposed = False

    @classmethod
    def for_plan(cls, plan: LaunchPlan, node_rank: int, *, now: float) -> NodeState:
        """Node ``node_rank`` of ``plan``."""
        return cls(
            node_rank,
            plan.node(node_rank).host,
            shutdown_timeout=plan.shutdown_timeout,
            slurm_signals_ranks=plan.slurm.signals_ranks,
            now=now,
            stop_grace=plan.stop_grace,
            stop_on=plan.stop_signum,
        )

    @property
    def stopping(self) -> bool:
        return self.stop_deadline is not None or self.grace_deadline is not None

    @property
    def stopped_by(self) -> int | None:
        """The signal of a requested stop that ended the node (None: none, or a rank failed first)."""
        return self.stop_signal if self.requested_at is not None and self.root_cause is None else None

    @property
    def alive(self) -> tuple[int, ...]:
        """The ranks not reaped yet."""
        return tuple(rank for rank, r in self.ranks.items() if r.returncode is None)

    # ---- events -------------------------------------------------------------
    def on_spawned(self, rank: int, local_rank: int, pid: int) -> tuple[Action, ...]:
        who = RankId(rank, local_rank, self.node_rank, self.host, pid)
        self.ranks[rank] = _RankStatus(who)
        return (Emit(wire.Spawned(rank=rank, local_rank=local_rank, pid=pid, host=self.host)),)

    def on_cannot_start(
        self, rank: int, local_rank: int, program: str, reason: str, *, missing: bool, now: float, wall: float
    ) -> tuple[Action, ...]:
        who = RankId(rank, local_rank, self.node_rank, self.host, 0)
        result = cannot_start(who, program, reason, missing=missing, wall=wall)
        if self.root_cause is None:
            self.root_cause = result
        return (Emit(result), *self._teardown(signal.SIGTERM, now, wall))

    def on_rank_exit(
        self,
        rank: int,
        returncode: int,
        record: ErrorRecord,
        *,
        now: float,
        wall: float,
        died: DeathWindow | None = None,
        stderr_tail: tuple[str, ...] = (),
        beats: int = 0,
    ) -> tuple[Action, ...]:
        r = self.ranks[rank]
        r.returncode = returncode
        self.last_read = now
        result = rank_exit(
            r.who,
            returncode,
            record,
            signalled_at=r.signalled_at,
            wall=wall,
            died=died,
            stderr_tail=stderr_tail,
            beats=beats,
        )
        if not result.failed or result.by_agent:
            if self.requested_at is not None and not r.group_signalled:  # what it forked goes with it now
                r.group_signalled = True
                return (Exited(result), Signal((rank,), signal.SIGTERM))
            return (Exited(result),)
        earlier = self.root_cause
        if earlier is None or _order(result) < _order(earlier):
            self.root_cause = result  # the earliest failure of its own, not the first reaped
        return (Exited(result), *self._teardown(signal.SIGTERM, now, wall)) if earlier is None else (Exited(result),)

    def on_read(self, now: float) -> None:
        """Output (or a pipe's end) was read."""
        self.last_read = now

    def on_signal(self, signum: int, *, now: float, wall: float, parent_lost: bool = False) -> tuple[Action, ...]:
        """A signal to the agent; ``parent_lost``: a SIGTERM its parent's death sent (as often as that parent had
        threads), the launcher lost as by its control channel's end, never a second request that ends the grace."""
        if parent_lost:
            return self.on_control_closed(now=now, wall=wall)
        if signum == wire.STACKS_SIGNAL:
            return self._stacks()
        if signum == wire.TEARDOWN_SIGNAL:
            return self.on_control(wire.STOP, now=now, wall=wall)
        if signum == self.stop_on or signum in wire.STOP_SIGNALS:
            return self._stop_by_signal(signum, now, wall)
        if signum in wire.FORWARDED_SIGNALS:
            return () if self.slurm_signals_ranks else self._to_alive(signum)
        return ()

    def _stop_by_signal(self, signum: int, now: float, wall: float) -> tuple[Action, ...]:
        """A second, SAME_STOP or more after the first, ends the grace; --stop-on-signal's: ranks hear SIGTERM; under
        Slurm, Slurm signalled each rank."""
        if self.grace_deadline is not None:
            return self.end_grace(now) if now - (self.grace_deadline - self.stop_grace) >= SAME_STOP else ()
        send = signal.SIGTERM if signum == self.stop_on else None if self.slurm_signals_ranks else signum
        return self.request_stop(signum, now=now, wall=wall, send=send)

    def on_control(self, command: wire.Command, *, now: float, wall: float) -> tuple[Action, ...]:
        """A control command: ``stop`` (fail-fast), a stop request, or a signal number to pass to every live rank."""
        if command == wire.STOP:
            if self.stop_signal is None:
                self.stop_signal = signal.SIGTERM
            return self._teardown(signal.SIGTERM, now, wall)
        if isinstance(command, wire.StopAt):
            return (SetStopStep(command.step),)
        if isinstance(command, wire.StopRequest):
            send = signal.SIGTERM if command.signum == self.stop_on else command.signum
            asked = self.request_stop(command.signum, now=now, wall=wall, send=send)
            return (*asked, *self.end_grace(now)) if command.now else asked
        if command == wire.STACKS_SIGNAL:
            return self._stacks()
        if isinstance(command, int):
            return self._to_alive(command)
        return ()

    def on_control_closed(self, *, now: float, wall: float) -> tuple[Action, ...]:
        """The launcher (or its connection) is gone: a requested stop, whose step this node decides alone."""
        self.launcher_answers = False
        if self.proposed:  # it will not answer the proposal made
            return (ProposeStep(alone=True),)
        return self.request_stop(signal.SIGTERM, now=now, wall=wall, send=signal.SIGTERM)

    def launcher_unreachable(self) -> tuple[Action, ...]:
        """The connection that carries the launcher's answer never opened (a dial-back that failed): this node
        decides a stop's step alone; the job goes on."""
        self.launcher_answers = False
        return (ProposeStep(alone=True),) if self.proposed else ()

    def request_stop(self, signum: int, *, now: float, wall: float, send: int | None) -> tuple[Action, ...]:
        """A stop requested by ``signum``: ``send`` (None: nothing) goes to each live rank's main process, and
        the groups get SIGTERM after the grace. Once stopping, another request changes nothing."""
        if self.stopping:
            return ()
        self.stop_signal, self.requested_at = signum, wall
        self.grace_deadline = now + self.stop_grace
        self.propose_at = now + SETTLE  # should_stop()'s ranks: the stop pages are marked pending (StopRequested)
        alive = self.alive
        for rank in alive:
            self.ranks[rank].signalled_at = wall
        told = Emit(wire.StopAsked(self.node_rank, signum, wall))
        if self.stop_grace <= 0:  # no grace: the groups get the signal at once, as a teardown
            teardown = self._teardown(send or signum, now, wall)
            return (Stopping(signum, 0.0), told, StopRequested((), signum, wall), *teardown)
        asked = alive if send is not None else ()
        return (Stopping(signum, self.stop_grace), told, StopRequested(asked, send or signum, wall + self.stop_grace))

    def end_grace(self, now: float) -> tuple[Action, ...]:
        """A second request: the groups get SIGTERM now, not at the grace's end (nothing once they had it)."""
        if self.stop_deadline is not None or self.grace_deadline is None:
            return ()
        return self._teardown(signal.SIGTERM, now, wall=None)

    def tick(self, now: float, pipes: Pipes) -> tuple[Action, ...]:
        """Before each wait: the SIGKILL at the deadline, and when the ranks are gone, their pipes and the end."""
        actions: list[Action] = [AbandonStalledReaders()] if self.stopping else []
        if self.propose_at is not None and now >= self.propose_at:
            self.propose_at, self.proposed = None, True
            actions.append(ProposeStep(alone=not self.launcher_answers))
        alive = self.alive
        if alive:
            if self.stop_deadline is not None and now >= self.stop_deadline:
                actions.append(Signal(alive, signal.SIGKILL))
            elif self.stop_deadline is None and self.grace_deadline is not None and now >= self.grace_deadline:
                actions.extend(self._teardown(signal.SIGTERM, now, wall=None))
            return tuple(actions)
        if self.ranks_done_at is None:
            self.ranks_done_at = now
        if pipes.open:
            if self._held_open_too_long(now, pipes):
                actions.append(StopReading())
        elif pipes.drained:
            actions.append(Finish(self.exit_code()))
        return tuple(actions)

    def wait_cap(self, now: float) -> float | None:
        """The longest the next wait may be, as far as the decisions go (None: no limit)."""
        caps: list[float] = [] if self.propose_at is None else [max(0.0, self.propose_at - now)]
        alive = self.alive
        if not alive:
            caps.append(DRAIN_POLL)  # waiting for pipes to close and output to drain
        deadline = self.stop_deadline if self.stop_deadline is not None else self.grace_deadline
        if deadline is not None:
            remaining = deadline - now
            if alive:
                caps.append(remaining if remaining > 0 else KILL_REPEAT)
            caps.append(STALL / 2)
        return min(caps) if caps else None

    def exit_code(self) -> int:
        """The root cause's code; else 128+N after a stop by signal N; else the first failed rank's; else 0."""
        if self.root_cause is not None:
            return self.root_cause.code
        if self.stop_signal is not None:
            return 128 + self.stop_signal
        failed = [r.returncode for r in self.ranks.values() if r.returncode]
        return wire.exit_code_of(failed[0])[0] if failed else 0

    # ---- helpers ------------------------------------------------------------
    def _held_open_too_long(self, now: float, pipes: Pipes) -> bool:
        """Ranks gone, their pipes still open: silent for a moment, or written to for the whole grace period."""
        assert self.ranks_done_at is not None
        if now - self.ranks_done_at > self.shutdown_timeout:
            return True
        return now - self.last_read > HELD_OPEN and pipes.reading_all

    def _teardown(self, signum: int, now: float, wall: float | None) -> tuple[Action, ...]:
        """``signum`` to every live rank's group, once; SIGKILL ``shutdown_timeout`` later (``wall`` None: as asked)."""
        actions: list[Action] = []
        if self.stop_deadline is None:
            if self.grace_deadline is None:
                actions.append(Stopping(signum))
            self.stop_deadline = now + self.shutdown_timeout
        targets = tuple(rank for rank, r in self.ranks.items() if r.returncode is None and not r.group_signalled)
        for rank in targets:  # one signal per rank per teardown
            r = self.ranks[rank]
            r.group_signalled = True
            if r.signalled_at is None:
                r.signalled_at = wall if wall is not None else self.requested_at
        if targets:
            actions.append(Signal(targets, signum))
        return tuple(actions)

    def _stacks(self) -> tuple[Action, ...]:
        return () if self.stopping else (RequestStacks(),)

    def _to_alive(self, signum: int) -> tuple[Action, ...]:
        alive = self.alive
        return (Signal(alive, signum),) if alive else ()


def _order(event: wire.RankExit) -> tuple[bool, float]:
    return cause_order(event.error, event.stderr_tail, event.ts)
