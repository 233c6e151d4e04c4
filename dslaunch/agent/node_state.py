"""What one node's agent decides, without I/O: the node's root cause, the teardown, the exit code, when it is done.

The I/O shell (``agent/node_loop.py``) owns the processes, pipes, sinks and clocks. It tells
:class:`NodeState` what happened (a rank started, exited, could not start; a signal; a control
command; output read; a moment passed) with the times as arguments, and executes the actions it gets
back, in order. The first rank that fails on its own is the root cause: every other live rank gets
SIGTERM once, and SIGKILL when ``shutdown_timeout`` has passed. A stop (control ``stop``, its EOF, or
SIGINT/SIGTERM/SIGHUP to the agent) tears down the same way and ends the node with 128+N, unless a
rank failed first. Once the node is done, :meth:`NodeState.tick` answers :class:`Finish` with its exit
code (as ``job/state.py`` ends a job with its outcome).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Protocol

from dslaunch import wire
from dslaunch.agent.failures import ErrorRecord
from dslaunch.output.sink import STALL

HELD_OPEN = 0.5  # ranks gone, pipes silent this long (a grandchild holds them): stop reading
DRAIN_POLL = 0.1  # ranks gone: how often to look at the pipes and sinks at the least
KILL_REPEAT = 0.05  # past the deadline: SIGKILL again this often until every rank is reaped
CLOCK_SLACK = 0.02  # a file's ctime comes from the kernel's coarse clock: up to a tick behind time.time()
WRITE_SLACK = 0.1  # a rank's failure time may precede the change of its error file by this much at most


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
class Stopping:
    """The teardown has begun (logged once)."""

    signum: int


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


Action = Emit | Exited | Signal | Stopping | RequestStacks | AbandonStalledReaders | StopReading | Finish


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


# ---- how a rank ended ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RankId:
    rank: int
    local_rank: int
    node_rank: int
    host: str
    pid: int


def claimed_failure_time(record: ErrorRecord, signalled_at: float | None) -> float | None:
    """When the rank failed on its own, as its record claims it and as far as the kernel vouches for the claim; None:
    no claim that counts.

    The agent's own observation wins over what a rank writes: a claim counts only if the file was last changed
    (``written_at``, its ctime, which ``os.utime`` cannot set back) before our stop signal (``signalled_at``;
    None: not signalled), since what a rank writes once it is told to stop is no evidence of an earlier failure;
    and it is kept between ``WRITE_SLACK`` before that change and the change itself, so no rank dates its failure
    earlier than its file.
    """
    claimed, written = record.failed_at, record.written_at
    if claimed is None or written is None:
        return None
    if signalled_at is not None and written >= signalled_at - CLOCK_SLACK:
        return None
    return min(max(claimed, written - WRITE_SLACK), written + CLOCK_SLACK)


@dataclass(frozen=True)
class DeathWindow:
    """What the agent saw itself: the rank was alive at ``after`` (wall time) and had ended by ``before`` (the
    wait that reported its end returned then)."""

    after: float
    before: float


def rank_exit(
    who: RankId,
    returncode: int,
    record: ErrorRecord,
    *,
    signalled_at: float | None,
    wall: float,
    died: DeathWindow | None = None,
    stderr_tail: tuple[str, ...] = (),
    beats: int = 0,
) -> wire.RankExit:
    """The exit event of a rank that ended with ``returncode`` (a Popen one), ``wall`` being the time now.

    A rank whose error record shows it failed before our stop signal (``claimed_failure_time``) failed on its
    own, even if the signal ended it during its at-exit teardown: it is a root-cause candidate, at the time and
    with the code it failed with, not how it ended. So is a rank that had ended before we signalled it (``died``:
    its end was reported by a wait that returned before the signal); without a record that dates its failure,
    it failed at the earliest time the agent saw it could have (``died.after``): a rank that ends at once
    (``os._exit``, a crash) makes its peers fail a moment later, and they must not be named instead.
    """
    code, signame = wire.exit_code_of(returncode)
    if not code:
        record = ErrorRecord()
    if signalled_at is not None and died is not None and signalled_at >= died.before:
        signalled_at = None  # our signal came after its end
    failed_at = claimed_failure_time(record, signalled_at)
    signalled = signalled_at is not None
    if failed_at is None and not signalled and died is not None:
        failed_at = died.after
    if failed_at is not None and signalled and record.code:
        code, signame = record.code, None
    return wire.RankExit(
        rank=who.rank,
        local_rank=who.local_rank,
        node_rank=who.node_rank,
        host=who.host,
        pid=who.pid,
        code=code,
        signal=signame,
        ts=wall if failed_at is None else failed_at,
        by_agent=signalled and failed_at is None,
        error=record.error,
        stderr_tail=stderr_tail if code else (),
        beats=beats,
    )


def cannot_start(who: RankId, program: str, reason: str, *, missing: bool, wall: float) -> wire.RankExit:
    """A rank that cannot be started fails like one that exits 127 (not found) or 126 (cannot run), as a shell
    would: its error goes in the summary."""
    return wire.RankExit(
        rank=who.rank,
        local_rank=who.local_rank,
        node_rank=who.node_rank,
        host=who.host,
        pid=0,
        code=127 if missing else 126,
        signal=None,
        ts=wall,
        by_agent=False,
        error=f"cannot start rank {who.rank}: {program}: {reason}\n",
        stderr_tail=(),
    )


# ---- the node ----------------------------------------------------------------------------------------------
@dataclass
class _RankStatus:
    """What the decisions keep of a started rank: who it is, when we signalled it, how it ended."""

    who: RankId
    signalled_at: float | None = None  # wall time of our stop signal
    returncode: int | None = None


class NodeState:
    """One node's ranks and what to do next. ``now``: monotonic seconds; ``wall``: ``time.time()``."""

    def __init__(
        self, node_rank: int, host: str, *, shutdown_timeout: float, slurm_signals_ranks: bool, now: float
    ) -> None:
        self.node_rank = node_rank
        self.host = host
        self.shutdown_timeout = shutdown_timeout
        self.slurm_signals_ranks = slurm_signals_ranks  # Slurm already signals every rank: forward nothing
        self.ranks: dict[int, _RankStatus] = {}  # in start order
        self.root_cause: wire.RankExit | None = None
        self.stop_signal: int | None = None
        self.stop_deadline: float | None = None  # monotonic
        self.ranks_done_at: float | None = None
        self.last_read = now

    @property
    def stopping(self) -> bool:
        return self.stop_deadline is not None

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
            return (Exited(result),)
        earlier = self.root_cause
        if earlier is None or result.ts < earlier.ts:
            self.root_cause = result  # the earliest failure, not the first reaped
        return (Exited(result), *self._teardown(signal.SIGTERM, now, wall)) if earlier is None else (Exited(result),)

    def on_read(self, now: float) -> None:
        """Output (or a pipe's end) was read."""
        self.last_read = now

    def on_signal(self, signum: int, *, now: float, wall: float) -> tuple[Action, ...]:
        """A signal to the agent."""
        if signum == wire.STACKS_SIGNAL:
            return self._stacks()
        if signum in wire.FORWARDED_SIGNALS:
            return () if self.slurm_signals_ranks else self._to_alive(signum)
        if signum in wire.STOP_SIGNALS:
            if self.stop_signal is None:
                self.stop_signal = signum
            return self._teardown(signum, now, wall)
        return ()

    def on_control(self, command: str | int, *, now: float, wall: float) -> tuple[Action, ...]:
        """A control command: ``stop``, or a signal number to pass to every live rank (a remote launcher's)."""
        if command == wire.STOP:
            return self.on_control_closed(now=now, wall=wall)
        if command == wire.STACKS_SIGNAL:
            return self._stacks()
        if isinstance(command, int):
            return self._to_alive(command)
        return ()

    def on_control_closed(self, *, now: float, wall: float) -> tuple[Action, ...]:
        """``stop``, or the launcher (or its connection) is gone."""
        if self.stop_signal is None:
            self.stop_signal = signal.SIGTERM
        return self._teardown(signal.SIGTERM, now, wall)

    def tick(self, now: float, pipes: Pipes) -> tuple[Action, ...]:
        """Before each wait: the SIGKILL at the deadline, and when the ranks are gone, their pipes and the end."""
        actions: list[Action] = [AbandonStalledReaders()] if self.stopping else []
        alive = self.alive
        if alive:
            if self.stop_deadline is not None and now >= self.stop_deadline:
                actions.append(Signal(alive, signal.SIGKILL))
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
        caps: list[float] = []
        alive = self.alive
        if not alive:
            caps.append(DRAIN_POLL)  # waiting for pipes to close and output to drain
        if self.stop_deadline is not None:
            remaining = self.stop_deadline - now
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

    def _teardown(self, signum: int, now: float, wall: float) -> tuple[Action, ...]:
        actions: list[Action] = []
        if self.stop_deadline is None:
            actions.append(Stopping(signum))
            self.stop_deadline = now + self.shutdown_timeout
        targets = tuple(rank for rank, r in self.ranks.items() if r.returncode is None and r.signalled_at is None)
        for rank in targets:  # one signal per rank per teardown
            self.ranks[rank].signalled_at = wall
        if targets:
            actions.append(Signal(targets, signum))
        return tuple(actions)

    def _stacks(self) -> tuple[Action, ...]:
        return () if self.stopping else (RequestStacks(),)

    def _to_alive(self, signum: int) -> tuple[Action, ...]:
        alive = self.alive
        return (Signal(alive, signum),) if alive else ()
