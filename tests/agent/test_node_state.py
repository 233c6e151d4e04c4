"""The node agent's decisions (agent/node_state.py), in-process: rank exits, signals, control commands, reads and
the time go in, actions come out. No processes, no sleeps: time is an argument. Plus the error-record parser."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from dslaunch import wire
from dslaunch.agent.failures import TAIL_BYTES, ErrorRecord, keep_tail, parse_error_record, tail_lines
from dslaunch.agent.node_state import (
    HELD_OPEN,
    KILL_REPEAT,
    SAME_STOP,
    SETTLE,
    AbandonStalledReaders,
    Action,
    Emit,
    Exited,
    Finish,
    NodeState,
    ProposeStep,
    RequestStacks,
    SetStopStep,
    Signal,
    Stopping,
    StopReading,
    StopRequested,
)
from dslaunch.agent.rank_exits import DeathWindow, RankId, rank_exit
from dslaunch.output.sink import STALL

TERM, INT, HUP, KILL, USR1 = signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGKILL, signal.SIGUSR1
GRACE = 5.0  # the plan's shutdown_timeout in these tests
WHO = RankId(rank=3, local_rank=1, node_rank=0, host="h", pid=42)
NONE = ErrorRecord()


def _honest(error: str | None, failed_at: float | None, code: int | None) -> ErrorRecord:
    """A record as the bootstrap writes it: its file changed a moment after the failure."""
    return ErrorRecord(error, failed_at, code, written_at=None if failed_at is None else failed_at + 0.001)


@dataclass(frozen=True)
class Pipes:
    open: bool = False
    reading_all: bool = True
    drained: bool = True


CLOSED = Pipes()


def _node(ranks: int = 3, *, slurm_signals_ranks: bool = False, grace: float = 0.0) -> NodeState:
    state = NodeState(
        0, "h", shutdown_timeout=GRACE, slurm_signals_ranks=slurm_signals_ranks, now=0.0, stop_grace=grace, stop_on=USR1
    )
    for rank in range(ranks):
        state.on_spawned(rank, rank, 100 + rank)
    return state


def _exits(actions: tuple[Action, ...]) -> list[wire.RankExit]:
    return [a.result for a in actions if isinstance(a, Exited)]


def _signals(actions: tuple[Action, ...]) -> list[Signal]:
    return [a for a in actions if isinstance(a, Signal)]


def _exit(
    state: NodeState, rank: int, returncode: int, record: ErrorRecord = NONE, t: float = 1.0
) -> tuple[Action, ...]:
    return state.on_rank_exit(rank, returncode, record, now=t, wall=1000.0 + t)


# ---- how one rank ended: (returncode, signalled_at, record) -> (code, signal, ts, by_agent) ----------------------
WALL = 500.0


@pytest.mark.parametrize(
    ("returncode", "signalled_at", "record", "expected"),
    [
        pytest.param(0, None, NONE, (0, None, WALL, False), id="clean exit"),
        pytest.param(0, 400.0, _honest("tb", 300.0, 1), (0, None, WALL, True), id="clean after our signal"),
        pytest.param(1, None, NONE, (1, None, WALL, False), id="failed, no record: now"),
        pytest.param(1, None, _honest("tb", 300.0, 1), (1, None, 300.0, False), id="failed: its time"),
        pytest.param(2, None, _honest("tb", 300.0, 7), (2, None, 300.0, False), id="unsignalled: how it ended"),
        pytest.param(-15, 400.0, NONE, (143, "SIGTERM", WALL, True), id="our SIGTERM"),
        pytest.param(1, 400.0, NONE, (1, None, WALL, True), id="failed after our signal, no record"),
        pytest.param(-15, 400.0, _honest("tb", 450.0, 1), (143, "SIGTERM", WALL, True), id="failed after signal"),
        pytest.param(-15, 400.0, _honest("tb", 300.0, 3), (3, None, 300.0, False), id="failed before signal"),
        pytest.param(-9, 400.0, _honest("tb", 300.0, None), (137, "SIGKILL", 300.0, False), id="before, no code"),
        pytest.param(-15, 400.0, _honest(None, None, 3), (143, "SIGTERM", WALL, True), id="code without time"),
    ],
)
def test_rank_exit(
    returncode: int, signalled_at: float | None, record: ErrorRecord, expected: tuple[int, str | None, float, bool]
) -> None:
    result = rank_exit(WHO, returncode, record, signalled_at=signalled_at, wall=WALL, stderr_tail=("boom",))
    assert (result.code, result.signal, result.ts, result.by_agent) == expected
    assert (result.rank, result.local_rank, result.node_rank, result.host, result.pid) == (3, 1, 0, "h", 42)
    assert result.error == (record.error if returncode else None)
    assert result.stderr_tail == (("boom",) if result.code else ())


# ---- the node: root cause and teardown --------------------------------------------------------------------------
def test_the_first_rank_to_fail_is_the_root_cause_and_the_others_get_sigterm_once() -> None:
    state = _node()
    actions = _exit(state, 1, 3, _honest("tb", 1000.5, 3))
    assert actions == (Exited(_exits(actions)[0]), Stopping(TERM), Signal((0, 2), TERM))
    assert state.root_cause == _exits(actions)[0] and state.root_cause.code == 3
    assert state.stop_deadline == 1.0 + GRACE
    assert _signals(state.on_control(wire.STOP, now=1.5, wall=1001.5)) == []  # signalled already
    assert _signals(state.on_signal(INT, now=1.6, wall=1001.6)) == []
    (ended,) = _exits(_exit(state, 0, -15, t=2.0))
    assert ended.by_agent and ended.code == 143
    assert state.exit_code() == 3 and state.stop_signal == TERM  # the root cause wins over the stop


def test_a_signalled_rank_that_failed_before_the_signal_keeps_its_time_and_code_but_not_the_root_cause() -> None:
    state = _node()
    _exit(state, 0, 1, _honest("first", 1000.9, 1), t=1.0)  # signalled_at = wall 1001.0
    (second,) = _exits(_exit(state, 1, -15, _honest("second", 1000.95, 5), t=1.1))
    assert (second.code, second.signal, second.ts, second.by_agent) == (5, None, 1000.95, False)
    assert state.root_cause is not None and state.root_cause.rank == 0  # not replaced
    (third,) = _exits(_exit(state, 2, 1, _honest("late", 1001.05, 1), t=1.2))
    assert third.by_agent  # it failed after our signal: the teardown's doing


def test_a_second_failure_on_its_own_signals_no_one_again_and_is_the_root_cause_only_if_earlier() -> None:
    state = _node()
    _exit(state, 0, 2)  # rank 0 fails at wall time 1001.0 (no record) and signals ranks 1 and 2
    actions = _exit(state, 1, 7, _honest("tb", 1000.5, 7), t=1.5)  # it failed before rank 0, on its own
    assert _exits(actions)[0].code == 7 and not _exits(actions)[0].by_agent
    assert state.root_cause is not None and state.root_cause.rank == 1  # the first to fail, not the first reaped
    assert _signals(actions) == [] and state.exit_code() == 7

    state = _node()
    _exit(state, 0, 2, _honest("tb", 1000.9, 2))
    _exit(state, 1, 7, _honest("tb", 1000.95, 7), t=1.5)  # on its own too, but later
    assert state.root_cause is not None and state.root_cause.rank == 0 and state.exit_code() == 2


def test_a_rank_reported_ended_by_the_same_wait_as_the_root_cause_is_not_the_teardowns_doing() -> None:
    """Rank 1 ends at once (os._exit(7), no record); rank 0, its peer, fails a moment later from the lost
    connection and is reaped first from the same wait: rank 1 failed first, at the earliest time it can have."""
    state = _node()
    window = DeathWindow(after=1000.2, before=1000.9)  # the wait began at .2 and returned at .9 with both
    first = state.on_rank_exit(0, 1, _honest("gloo", 1000.6, 1), now=1.0, wall=1001.0, died=window)
    assert _signals(first) == [Signal((1, 2), TERM)]  # rank 1 counts as signalled at 1001.0, after its end
    second = state.on_rank_exit(1, 7, NONE, now=1.1, wall=1001.1, died=window)
    (result,) = _exits(second)
    assert not result.by_agent and result.code == 7 and result.ts == 1000.2
    assert state.root_cause is not None and state.root_cause.rank == 1 and state.exit_code() == 7

    late = _node()  # a rank whose end a later wait reported was signalled before it ended: the teardown's doing
    late.on_rank_exit(0, 1, NONE, now=1.0, wall=1001.0, died=window)
    (stopped,) = _exits(late.on_rank_exit(1, 7, NONE, now=1.5, wall=1001.5, died=DeathWindow(1001.2, 1001.4)))
    assert stopped.by_agent and late.root_cause is not None and late.root_cause.rank == 0


def test_a_launchers_stop_tears_down_at_once_fail_fast() -> None:
    """``stop`` (a rank failed on another node): every group gets SIGTERM now, no grace."""
    state = _node(grace=30.0)
    assert state.on_control(wire.STOP, now=1.0, wall=1001.0) == (Stopping(TERM), Signal((0, 1, 2), TERM))
    assert state.stop_deadline == 1.0 + GRACE
    for rank in range(3):
        (ended,) = _exits(_exit(state, rank, -TERM, t=2.0))
        assert ended.by_agent
    assert state.root_cause is None and state.exit_code() == 143 and state.stopped_by is None


@pytest.mark.parametrize(
    ("stop", "sig"),
    [
        pytest.param(lambda s: s.on_control_closed(now=1.0, wall=1001.0), TERM, id="control EOF"),
        pytest.param(lambda s: s.on_control(wire.StopRequest(INT), now=1.0, wall=1001.0), INT, id="stop SIGINT"),
        pytest.param(lambda s: s.on_signal(TERM, now=1.0, wall=1001.0), TERM, id="SIGTERM"),
        pytest.param(lambda s: s.on_signal(INT, now=1.0, wall=1001.0), INT, id="SIGINT"),
        pytest.param(lambda s: s.on_signal(HUP, now=1.0, wall=1001.0), HUP, id="SIGHUP"),
    ],
)
def test_without_a_grace_a_stop_tears_down_with_its_signal_and_ends_with_128_plus_n(
    stop: Callable[[NodeState], tuple[Action, ...]], sig: int
) -> None:
    state = _node()
    told = Emit(wire.StopAsked(0, sig, 1001.0))
    assert stop(state) == (Stopping(sig, 0.0), told, StopRequested((), sig, 1001.0), Signal((0, 1, 2), sig))
    assert state.stop_deadline == 1.0 + GRACE
    for rank in range(3):
        (ended,) = _exits(_exit(state, rank, -sig, t=2.0))
        assert ended.by_agent
    assert state.root_cause is None and state.exit_code() == 128 + sig and state.stopped_by == sig
    assert stop(state) == ()  # nobody left, already stopping


@pytest.mark.parametrize(
    ("stop", "sig", "sent"),
    [
        pytest.param(lambda s: s.on_control_closed(now=1.0, wall=1001.0), TERM, TERM, id="control EOF"),
        pytest.param(lambda s: s.on_control(wire.StopRequest(TERM), now=1.0, wall=1001.0), TERM, TERM, id="stop"),
        pytest.param(lambda s: s.on_signal(INT, now=1.0, wall=1001.0), INT, INT, id="SIGINT"),
        pytest.param(lambda s: s.on_signal(USR1, now=1.0, wall=1001.0), USR1, TERM, id="--stop-on-signal USR1"),
    ],
)
def test_a_requested_stop_signals_each_main_process_and_the_groups_only_when_the_grace_is_over(
    stop: Callable[[NodeState], tuple[Action, ...]], sig: int, sent: int
) -> None:
    state = _node(grace=20.0)
    told = Emit(wire.StopAsked(0, sig, 1001.0))
    assert stop(state) == (Stopping(sig, 20.0), told, StopRequested((0, 1, 2), sent, 1021.0))
    assert any(isinstance(a, ProposeStep) for a in state.tick(1.0 + SETTLE, CLOSED))  # the node's stop step
    assert (
        state.stop_deadline is None
        and state.wait_cap(1.0 + SETTLE) == STALL / 2
        and state.wait_cap(20.95) == pytest.approx(0.05)
    )
    (ended,) = _exits(exited := _exit(state, 0, 0, t=2.0))  # saved and exited 0: what it forked goes now
    assert not ended.failed and _signals(exited) == [Signal((0,), TERM)]
    (ended,) = _exits(_exit(state, 1, 1, t=3.0))  # failed after the request: not a root cause
    assert ended.by_agent and state.root_cause is None
    assert state.tick(20.9, CLOSED) == (AbandonStalledReaders(),)
    assert state.tick(21.0, CLOSED) == (AbandonStalledReaders(), Signal((2,), TERM))  # the grace is over
    assert state.stop_deadline == 21.0 + GRACE
    assert _signals(state.tick(21.0 + GRACE, CLOSED)) == [Signal((2,), KILL)]
    _exit(state, 2, -KILL, t=27.0)
    assert state.exit_code() == 128 + sig and state.stopped_by == sig and state.requested_at == 1001.0


def test_a_second_signal_ends_the_grace_at_once_and_a_third_changes_nothing() -> None:
    state = _node(2, grace=20.0)
    state.on_signal(TERM, now=1.0, wall=1001.0)
    assert state.on_signal(TERM, now=2.0, wall=1002.0) == (Signal((0, 1), TERM),)
    assert state.stop_deadline == 2.0 + GRACE
    assert state.on_signal(INT, now=3.0, wall=1003.0) == ()
    assert state.exit_code() == 143


def test_a_dying_launchers_parent_death_signals_are_one_request_not_a_second() -> None:
    """SIGKILL to a launcher: its forked agent hears SIGTERM once per thread the launcher had, then its control
    channel's end; while the parent is not yet seen to change, only the time tells them from a second request."""
    state = _node(2, grace=20.0)
    assert _signals(state.on_signal(TERM, now=1.0, wall=1001.0)) == []
    assert state.on_signal(TERM, now=1.0 + SAME_STOP / 2, wall=1001.1) == ()
    assert state.on_signal(TERM, now=5.0, wall=1005.0, parent_lost=True) == ()  # seen as the parent's death
    assert state.on_control_closed(now=5.1, wall=1005.1) == ()
    assert state.stop_deadline is None and state.grace_deadline == 21.0
    assert state.on_signal(TERM, now=6.0, wall=1006.0) == (Signal((0, 1), TERM),)  # a person's second: the grace ends


def test_a_repeated_stop_line_changes_nothing_until_it_says_now() -> None:
    """A pod hears its launcher's request and the coordinator's: only a second signal ends the grace."""
    state = _node(2, grace=20.0)
    state.on_control(wire.StopRequest(TERM), now=1.0, wall=1001.0)
    assert state.on_control(wire.StopRequest(TERM), now=1.5, wall=1001.5) == ()
    assert state.on_control(wire.StopRequest(TERM, now=True), now=2.0, wall=1002.0) == (Signal((0, 1), TERM),)
    fresh = _node(1, grace=20.0)  # the first request lost: both at once
    actions = fresh.on_control(wire.StopRequest(INT, now=True), now=2.0, wall=1002.0)
    assert _signals(actions) == [Signal((0,), TERM)] and fresh.exit_code() == 130


def test_under_slurm_a_stop_signal_goes_to_no_rank_again_but_the_stop_on_signal_does() -> None:
    slurm = _node(2, slurm_signals_ranks=True, grace=20.0)
    assert slurm.on_signal(TERM, now=1.0, wall=1001.0)[2] == StopRequested((), TERM, 1021.0)
    slurm = _node(2, slurm_signals_ranks=True, grace=20.0)
    assert slurm.on_signal(USR1, now=1.0, wall=1001.0)[2] == StopRequested((0, 1), TERM, 1021.0)


def test_a_failure_before_the_request_still_tears_down_fail_fast_and_is_the_root_cause() -> None:
    state = _node(2, grace=20.0)
    state.on_signal(TERM, now=2.0, wall=1002.0)
    actions = _exit(state, 0, 3, _honest("tb", 1001.0, 3), t=2.5)  # failed before the request
    assert _signals(actions) == [Signal((1,), TERM)] and state.stop_deadline == 2.5 + GRACE
    _exit(state, 1, -TERM, t=3.0)
    assert state.exit_code() == 3 and state.stopped_by is None


def test_a_stop_before_a_failure_keeps_its_code_and_a_later_stop_signal_changes_nothing() -> None:
    state = _node(2)
    state.on_signal(TERM, now=1.0, wall=1001.0)
    assert state.on_signal(INT, now=1.1, wall=1001.1) == ()
    _exit(state, 0, 1, t=2.0)  # failed after our signal, no record: the teardown's doing
    assert state.root_cause is None and state.exit_code() == 143


def test_sigkill_exactly_when_the_deadline_passes_and_again_until_the_ranks_are_reaped() -> None:
    state = _node(2)
    state.on_signal(TERM, now=10.0, wall=1010.0)
    deadline = 10.0 + GRACE
    state.tick(10.0 + SETTLE, CLOSED)  # the node's stop step (tests/agent/test_stop_pages.py)
    assert state.tick(deadline - 1e-6, CLOSED) == (AbandonStalledReaders(),)
    assert state.wait_cap(deadline - 1.0) == STALL / 2
    assert state.wait_cap(deadline - 0.1) == pytest.approx(0.1)
    assert state.tick(deadline, CLOSED) == (AbandonStalledReaders(), Signal((0, 1), KILL))
    assert state.wait_cap(deadline) == KILL_REPEAT
    _exit(state, 0, -9, t=deadline + 0.01)
    assert _signals(state.tick(deadline + 0.05, CLOSED)) == [Signal((1,), KILL)]


def test_no_sigkill_and_no_stalled_readers_check_without_a_teardown() -> None:
    state = _node(1)
    assert state.tick(1e9, CLOSED) == () and state.wait_cap(1e9) is None


@pytest.mark.parametrize(
    ("steps", "code"),
    [
        pytest.param([("exit", 0, 0), ("exit", 1, 0)], 0, id="all ranks exit 0"),
        pytest.param([("exit", 0, 0), ("exit", 1, 4)], 4, id="root cause code"),
        pytest.param([("exit", 1, -11), ("exit", 0, -15)], 139, id="root cause killed by a signal"),
        pytest.param([("stop", TERM, 0), ("exit", 0, -15), ("exit", 1, -15)], 143, id="stop signal"),
        pytest.param([("stop", INT, 0), ("exit", 0, 0), ("exit", 1, 0)], 130, id="stop, ranks exit 0"),
        pytest.param([("stop", TERM, 0), ("exit", 0, 1), ("exit", 1, 0)], 143, id="stop, then a failure"),
        pytest.param([("exit", 0, 2), ("exit", 1, 9)], 2, id="the first root cause, not a later failure"),
    ],
)
def test_exit_code(steps: list[tuple[str, int, int]], code: int) -> None:
    state = _node(2)
    for t, (what, number, returncode) in enumerate(steps, start=1):
        if what == "stop":
            state.on_signal(number, now=t, wall=1000.0 + t)
        else:  # each failed half a second before it exited
            _exit(state, number, returncode, _honest("tb", 1000.0 + t - 0.5, None), t=t)
    assert state.exit_code() == code


def test_without_a_root_cause_or_a_stop_the_first_failed_rank_gives_the_code() -> None:
    state = _node(2)
    for rank in (0, 1):
        state.ranks[rank].returncode = -6  # as if reaped while the state was not told (no root cause)
    assert state.exit_code() == 134


# ---- the end: ranks gone, pipes closed or held open, sinks idle -------------------------------------------------
def test_finish_waits_for_every_rank_the_pipes_and_the_sinks() -> None:
    state = _node(2)
    _exit(state, 0, 0)
    assert state.tick(2.0, CLOSED) == ()  # rank 1 still runs
    _exit(state, 1, 0, t=2.0)
    assert state.tick(2.01, Pipes(drained=False)) == ()
    assert state.wait_cap(2.01) == 0.1  # waiting for the output to drain
    assert state.tick(2.02, CLOSED) == (Finish(0),)


@pytest.mark.parametrize(
    ("reads", "reading_all", "at", "stops"),
    [
        pytest.param((), True, HELD_OPEN - 0.01, False, id="silent, not long enough"),
        pytest.param((), True, HELD_OPEN + 0.01, True, id="silent for _HELD_OPEN"),
        pytest.param((), False, HELD_OPEN + 0.01, False, id="silent, but a sink is full"),
        pytest.param((), False, GRACE + 0.01, True, id="a sink full for the whole grace"),
        pytest.param(tuple(i / 10 for i in range(50)), True, GRACE - 0.01, False, id="written to, within the grace"),
        pytest.param(tuple(i / 10 for i in range(52)), True, GRACE + 0.11, True, id="written to for the whole grace"),
    ],
)
def test_pipes_held_open_after_the_ranks_are_gone(
    reads: tuple[float, ...], reading_all: bool, at: float, stops: bool
) -> None:
    state = _node(1)
    _exit(state, 0, 0, t=0.0)
    pipes = Pipes(open=True, reading_all=reading_all)
    assert state.tick(0.0, pipes) == ()  # ranks_done_at = 0
    for t in reads:
        state.on_read(t)
    assert (StopReading() in state.tick(at, pipes)) is stops
    assert state.tick(at, CLOSED) == (Finish(0),)  # once closed, the node is done


def test_a_rank_that_cannot_start_is_the_root_cause_and_stops_the_started_ones() -> None:
    state = _node(2)
    actions = state.on_cannot_start(2, 2, "./a.out", "No such file or directory", missing=True, now=1.0, wall=1001.0)
    (event,) = [a.event for a in actions if isinstance(a, Emit)]
    assert isinstance(event, wire.RankExit)
    assert (event.code, event.pid, event.ts, event.by_agent) == (127, 0, 1001.0, False)
    assert event.error == "cannot start rank 2: ./a.out: No such file or directory\n"
    assert actions[1:] == (Stopping(TERM), Signal((0, 1), TERM))
    assert state.root_cause == event and state.exit_code() == 127
    (other,) = state.on_cannot_start(3, 0, "/tmp", "Permission denied", missing=False, now=1.0, wall=1001.0)
    assert isinstance(other, Emit) and isinstance(other.event, wire.RankExit) and other.event.code == 126
    assert state.root_cause == event  # the first one stays


# ---- forwarded signals and stacks -------------------------------------------------------------------------------
def test_forwarded_signals_reach_the_live_ranks_unless_slurm_signals_them() -> None:
    state = _node(3)
    _exit(state, 1, 0)
    assert state.on_signal(signal.SIGUSR2, now=2.0, wall=1002.0) == (Signal((0, 2), signal.SIGUSR2),)
    assert state.on_control(int(signal.SIGUSR2), now=2.0, wall=1002.0) == (Signal((0, 2), signal.SIGUSR2),)
    slurm = _node(2, slurm_signals_ranks=True)
    assert slurm.on_signal(signal.SIGUSR2, now=2.0, wall=1002.0) == ()
    assert slurm.on_control(int(signal.SIGUSR2), now=2.0, wall=1002.0) == (Signal((0, 1), signal.SIGUSR2),)
    assert state.on_signal(signal.SIGWINCH, now=2.0, wall=1002.0) == ()


def test_stacks_are_asked_for_only_while_the_job_runs() -> None:
    state = _node(1)
    assert state.on_signal(signal.SIGQUIT, now=1.0, wall=1001.0) == (RequestStacks(),)
    assert state.on_control(int(signal.SIGQUIT), now=1.0, wall=1001.0) == (RequestStacks(),)
    state.on_control(wire.STOP, now=1.0, wall=1001.0)
    assert state.on_signal(signal.SIGQUIT, now=1.1, wall=1001.1) == ()


def test_spawned_is_emitted_with_the_rank_and_its_pid() -> None:
    state = NodeState(2, "node-c", shutdown_timeout=GRACE, slurm_signals_ranks=False, now=0.0)
    assert state.on_spawned(5, 1, 77) == (Emit(wire.Spawned(rank=5, local_rank=1, pid=77, host="node-c")),)
    assert state.alive == (5,)


# ---- the error record and the stderr tail -----------------------------------------------------------------------
TORCH = {"message": {"message": "RuntimeError: x", "extraInfo": {"py_callstack": "Traceback...", "timestamp": "1"}}}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(json.dumps({"traceback": "tb", "ts": 12.5, "code": 3}), ErrorRecord("tb", 12.5, 3), id="ours"),
        pytest.param(
            json.dumps({"traceback": "", "ts": 12, "code": 2}), ErrorRecord(None, 12.0, 2), id="int ts, no text"
        ),
        pytest.param(json.dumps(TORCH), ErrorRecord("Traceback...", 1.0), id="torch @record"),
        pytest.param(json.dumps({"message": {"extraInfo": "x"}}), NONE, id="torch, no callstack"),
        pytest.param(json.dumps({"message": "plain", "traceback": "t"}), ErrorRecord("t"), id="our message"),
        pytest.param("{not json", NONE, id="garbage"),
        pytest.param("", NONE, id="empty"),
        pytest.param("[1, 2]", NONE, id="not an object"),
        pytest.param(json.dumps({"traceback": 5, "ts": "12", "code": "3"}), NONE, id="wrong types"),
        pytest.param(json.dumps({"traceback": "t", "ts": True, "code": True}), ErrorRecord("t"), id="booleans"),
        pytest.param(json.dumps({"ts": 1.0, "code": 0}), ErrorRecord(None, 1.0), id="code 0"),
        pytest.param(json.dumps({"ts": 1.0, "code": 256}), ErrorRecord(None, 1.0), id="code 256"),
    ],
)
def test_parse_error_record(text: str, expected: ErrorRecord) -> None:
    assert parse_error_record(text) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(b"", (), id="nothing"),
        pytest.param(b"a\nb\n", ("a", "b"), id="lines"),
        pytest.param(b"a\nb", ("a", "b"), id="last line unfinished"),
        pytest.param(b"10%\r50%\r100%\r\n", ("100%",), id="a bar's final state"),
        pytest.param(b"".join(b"%d\n" % i for i in range(30)), tuple(str(i) for i in range(10, 30)), id="last 20"),
    ],
)
def test_tail_lines(raw: bytes, expected: tuple[str, ...]) -> None:
    assert tail_lines(raw) == expected


def test_the_tail_keeps_the_last_bytes_and_drops_a_cut_first_line() -> None:
    tail = keep_tail(b"", b"x" * 10 + b"\n" + b"y" * TAIL_BYTES)
    assert len(tail) == TAIL_BYTES and tail_lines(tail + b"\nlast\n")[-1] == "last"
    assert tail_lines(keep_tail(b"", b"cut\n" + b"z\n" * (TAIL_BYTES // 2))) == ("z",) * 20


# ---- one stop step for the whole job (docs/stopping.md) -----------------------------------------------------------
def test_a_requested_stop_proposes_the_nodes_step_after_settle_and_writes_the_launchers() -> None:
    state = _node(grace=30.0)
    got = state.on_control(wire.StopRequest(TERM), now=1.0, wall=1001.0)
    assert StopRequested((0, 1, 2), TERM, 1001.0 + 30.0) in got  # the pages' pending mark (node_loop.py)
    assert state.wait_cap(1.0) == pytest.approx(SETTLE)
    assert ProposeStep(alone=False) not in state.tick(1.0 + SETTLE / 2, CLOSED)
    assert ProposeStep(alone=False) in state.tick(1.0 + SETTLE, CLOSED)
    assert ProposeStep(alone=False) not in state.tick(1.1, CLOSED)  # once
    assert state.on_control(wire.StopAt(40), now=1.2, wall=1001.2) == (SetStopStep(40),)


def test_a_failures_teardown_proposes_no_stop_step() -> None:
    state = _node(grace=30.0)
    state.on_control(wire.STOP, now=1.0, wall=1001.0)
    assert not any(isinstance(a, ProposeStep) for a in state.tick(2.0, CLOSED))


def test_a_node_without_a_launcher_to_answer_decides_its_step_alone() -> None:
    alone = _node(1, grace=30.0)
    alone.launcher_answers = False
    alone.on_signal(TERM, now=1.0, wall=1001.0)
    assert ProposeStep(alone=True) in alone.tick(1.0 + SETTLE, CLOSED)
    state = _node(grace=30.0)  # the launcher goes after the proposal: this node decides with what it has
    state.on_signal(TERM, now=1.0, wall=1001.0)
    assert ProposeStep(alone=False) in state.tick(1.0 + SETTLE, CLOSED)
    assert state.on_control_closed(now=1.5, wall=1001.5) == (ProposeStep(alone=True),)
    lost = _node(grace=30.0)  # the launcher's end is the request
    assert any(isinstance(a, StopRequested) for a in lost.on_control_closed(now=1.0, wall=1001.0))
    assert ProposeStep(alone=True) in lost.tick(1.0 + SETTLE, CLOSED)


def test_a_dial_back_that_never_connected_leaves_the_step_to_this_node_and_the_job_running() -> None:
    """pdsh's and mpirun's agents get the launcher's answer on a dial-back (node_loop.watch_side): if it never
    connects, the node decides alone; that is no stop of its own (unlike the launcher's end)."""
    before = _node(grace=30.0)
    assert before.launcher_unreachable() == ()  # no stop: nothing asked of the ranks
    assert not before.stopping
    before.on_signal(TERM, now=1.0, wall=1001.0)
    assert ProposeStep(alone=True) in before.tick(1.0 + SETTLE, CLOSED)
    after = _node(grace=30.0)  # the proposal went out before the dial-back gave up: it is answered here
    after.on_signal(TERM, now=1.0, wall=1001.0)
    assert ProposeStep(alone=False) in after.tick(1.0 + SETTLE, CLOSED)
    assert after.launcher_unreachable() == (ProposeStep(alone=True),)
