"""The launcher's supervision decisions (job/state.py), in-process: events, stream ends, signals and the
time go in, actions come out, the last of them Finish with the outcome. No processes, no sleeps: time is an
argument."""

from __future__ import annotations

import signal
from dataclasses import dataclass, replace

import pytest

from dslaunch import wire
from dslaunch.failure_bounds import peer_gone
from dslaunch.job import hang
from dslaunch.job.state import (
    Action,
    Finish,
    JobState,
    KillAll,
    Outcome,
    RequestStacks,
    RequestStop,
    Say,
    Signal,
    StopAll,
    StopAt,
    lost_node_code,
)
from dslaunch.job.summary import cause_line, format_summary
from dslaunch.plan import LaunchPlan
from dslaunch.wire import RankExit
from tests.plans import make_plan, with_launcher

PLAN = make_plan(hosts=("a", "b"), slots=("0", "1"))  # node 0: ranks 0, 1 on a; node 1: ranks 2, 3 on b
HANGS = replace(PLAN, hang_timeout=5.0)
MPI_HANGS = with_launcher(HANGS, "openmpi")
NODES = ((0, "a"), (1, "b"))  # the handles' (node_rank, host), by index


def _exit(rank: int, code: int = 1, ts: float = 1.0, *, by_agent: bool = False) -> RankExit:
    node = rank // 2
    return RankExit(rank, rank % 2, node, "ab"[node], 100 + rank, code, None, ts, by_agent)


@dataclass(frozen=True)
class Ev:
    index: int
    event: wire.Event
    now: float = 0.0


@dataclass(frozen=True)
class End:
    index: int
    status: int | None
    now: float = 0.0


@dataclass(frozen=True)
class Sig:
    signum: int
    now: float = 0.0


@dataclass(frozen=True)
class Tick:
    now: float


Step = Ev | End | Sig | Tick


def _feed(state: JobState, step: Step) -> tuple[Action, ...]:
    if isinstance(step, Ev):
        return state.on_event(step.index, step.event, step.now)
    if isinstance(step, End):
        return state.on_stream_end(step.index, step.status, step.now)
    if isinstance(step, Sig):
        return state.on_signal(step.signum, step.now)
    return state.tick(step.now)


def _run(steps: list[Step], plan: LaunchPlan = PLAN) -> tuple[JobState, list[tuple[Action, ...]]]:
    state = JobState(plan, NODES)
    return state, [_feed(state, step) for step in steps]


DONE_OK = [Ev(0, wire.Done(0, 0)), End(0, None), Ev(1, wire.Done(1, 0)), End(1, None)]
STOP_RANK = StopAll("rank 0 on a failed")

# (steps, the actions each step returns, the outcome's code, root cause rank, lost node)
CASES = {
    "success": (DONE_OK, [(), (), (), ()], 0, None, None),
    "the earlier ts wins, whatever the arrival order": (
        [Ev(0, _exit(0, 3, ts=2.0)), Ev(1, _exit(2, 4, ts=1.0))],
        [(STOP_RANK,), ()],
        4,
        2,
        None,
    ),
    "a rank the agent stopped is never the root cause": (
        [Ev(0, _exit(0, 143, ts=0.5, by_agent=True)), Ev(1, _exit(2, 7, ts=1.0))],
        [(), (StopAll("rank 2 on b failed"),)],
        7,
        2,
        None,
    ),
    "a late failure with an earlier ts, after the stop, still wins": (
        [Ev(0, _exit(0, 2, ts=5.0)), Ev(1, _exit(3, 9, ts=1.0, by_agent=False)), End(0, None), End(1, None)],
        [(STOP_RANK,), (), (), ()],
        9,
        3,
        None,
    ),
    "a stream that ends without Done is a lost node": (
        [End(1, -9), Ev(0, _exit(0, 143, by_agent=True)), End(0, None)],
        [(StopAll("lost node 1"),), (), ()],
        137,
        None,
        (1, "b", -9),
    ),
    "a failing rank first: the end of the streams is no lost node": (
        [Ev(0, _exit(1, 5)), End(0, None), End(1, -15)],
        [(StopAll("rank 1 on a failed"),), (), ()],
        5,
        1,
        None,
    ),
    "a stream end after Done is no lost node": (
        [Ev(1, wire.Done(1, 0)), End(1, None)],
        [(), ()],
        0,
        None,
        None,
    ),
    "Done != 0 stops all and is the code": (
        [Ev(1, wire.Done(1, 3)), End(1, None), Ev(0, wire.Done(0, 0)), End(0, None)],
        [(StopAll("a node agent failed"),), (), (), ()],
        3,
        None,
        None,
    ),
    "a rank failure beats a later Done code": (
        [Ev(0, _exit(0, 6)), Ev(0, wire.Done(0, 1)), End(0, None)],
        [(STOP_RANK,), (), ()],
        6,
        0,
        None,
    ),
    "a signal is no lost node and sets 128+N": (
        [Sig(signal.SIGTERM), End(0, 1), End(1, None)],
        [(RequestStop(signal.SIGTERM),), (), ()],
        143,
        None,
        None,
    ),
    "the signal's code wins over a root cause": (
        [Ev(0, _exit(0, 1)), Sig(signal.SIGINT)],
        [(STOP_RANK,), ()],
        130,
        0,
        None,
    ),
}


@pytest.mark.parametrize(("steps", "actions", "code", "cause", "lost"), CASES.values(), ids=CASES.keys())
def test_decisions(
    steps: list[Step],
    actions: list[tuple[Action, ...]],
    code: int,
    cause: int | None,
    lost: tuple[int, str, int | None] | None,
) -> None:
    state, got = _run(steps)
    assert got == actions
    outcome = state.outcome()
    ended = sum(isinstance(step, End) for step in steps) == len(NODES)
    if ended:  # every stream closed: the next tick ends the job with its outcome
        assert state.tick(1000.0) == (Finish(outcome),)
    else:
        assert Finish(outcome) not in state.tick(1000.0)
    assert outcome.code == code
    assert (outcome.root_cause.rank if outcome.root_cause else None) == cause
    assert outcome.lost_node == lost
    assert outcome.exits == tuple(s.event for s in steps if isinstance(s, Ev) and isinstance(s.event, RankExit))


def test_the_job_finishes_once_every_stream_has_closed_and_a_later_signal_changes_nothing() -> None:
    late = [Sig(signal.SIGINT), Sig(signal.SIGQUIT), Sig(signal.SIGUSR1)]
    state, got = _run([*DONE_OK, *late, Tick(1.0)])
    assert got == [(), (), (), (), (), (), (), (Finish(Outcome(0)),)]
    assert state.outcome() == Outcome(0)
    assert JobState(PLAN, ()).tick(0.0) == (Finish(Outcome(0)),)  # no agent: nothing to wait for


def test_a_second_stop_signal_kills_once_and_the_first_names_the_code() -> None:
    state, got = _run([Sig(signal.SIGINT), Sig(signal.SIGTERM), Sig(signal.SIGINT), Sig(signal.SIGINT), Tick(100.0)])
    assert got == [
        (RequestStop(signal.SIGINT),),
        (RequestStop(signal.SIGTERM, now=True),),  # the second ends the grace
        (KillAll(),),
        (),
        (),  # the deadline does not kill again
    ]
    assert state.outcome().code == 130 and state.outcome().signal == signal.SIGINT
    assert state.outcome().stopped_by == signal.SIGINT
    assert state.outcome().stop_signals == 4


def test_a_signal_during_a_fail_fast_teardown_names_the_code_and_a_second_kills() -> None:
    state, got = _run([Ev(0, _exit(0, 1)), Sig(signal.SIGTERM), Sig(signal.SIGTERM)])
    assert got == [(STOP_RANK,), (), (KillAll(),)]
    assert state.outcome().code == 143 and state.outcome().stopped_by is None


def test_a_requested_stop_gets_the_grace_before_the_kill_deadline() -> None:
    deadline = 10.0 + PLAN.stop_grace + PLAN.shutdown_timeout + 3.0
    _state, got = _run([Sig(signal.SIGTERM, now=10.0), Tick(deadline), Tick(deadline + 0.01)])
    assert got == [(RequestStop(signal.SIGTERM),), (), (KillAll(),)]
    _state, got = _run([Sig(signal.SIGTERM, now=10.0), Sig(signal.SIGTERM, now=11.0), Tick(deadline - 1)])
    assert got[-1] == (KillAll(),)  # the grace ended at 11: the deadline is shutdown_timeout + 3 s after that


def test_a_node_asked_to_stop_asks_every_node_and_its_done_is_no_failure() -> None:
    """One pod's SIGTERM (or a Slurm node's): every node gets the request, the job ends 143, the request's time is
    the earliest node's."""
    asked = wire.StopAsked(1, signal.SIGTERM, 1000.5)
    done = wire.Done(1, 143, signal.SIGTERM, 1000.5)
    steps: list[Step] = [
        Ev(1, asked),
        Ev(0, wire.StopAsked(0, signal.SIGTERM, 1000.7)),
        Ev(1, _exit(2, 0, 1001.0)),
        Ev(1, _exit(3, 0, 1002.0)),
        Ev(1, done),
        Ev(0, _exit(0, 0, 1001.5)),
        Ev(0, _exit(1, 1, 1001.5, by_agent=True)),
        Ev(0, wire.Done(0, 143, signal.SIGTERM, 1000.7)),
        End(0, 143),
        End(1, 143),
    ]
    state, got = _run(steps)
    assert got[0] == (RequestStop(signal.SIGTERM),) and all(a == () for a in got[1:-1])
    outcome = state.outcome()
    assert (outcome.code, outcome.stopped_by, outcome.signal, outcome.stop_requested_at) == (143, 15, None, 1000.5)
    assert format_summary(outcome, PLAN) == (
        "dslaunch: stopped by SIGTERM (exit 143); 3 of 4 ranks exited 0 within 1.5 s of the request\n"
        "  rank 1 on a exited with code 1"
    )
    assert cause_line(outcome) == "stopped by SIGTERM (requested)"
    assert _run(steps, replace(PLAN, stop_exit_code=99))[0].outcome().code == 99


def test_stop_on_signal_requests_a_stop_instead_of_forwarding() -> None:
    plan = replace(PLAN, stop_signal="SIGUSR1")
    state, got = _run([Sig(signal.SIGUSR2), Sig(signal.SIGUSR1)], plan)
    assert got == [(Signal(signal.SIGUSR2),), (RequestStop(signal.SIGUSR1),)]
    assert state.outcome().code == 138


def test_the_kill_deadline_comes_shutdown_timeout_plus_grace_after_the_stop() -> None:
    deadline = 10.0 + PLAN.shutdown_timeout + 3.0  # the agents get 3 s beyond their own --shutdown-timeout
    state, got = _run([Tick(9.0), Ev(0, _exit(0), now=10.0), Tick(deadline), Tick(deadline + 0.01), Tick(99.0)])
    assert got == [(), (STOP_RANK,), (), (KillAll(),), ()]
    assert state.killed


@pytest.mark.parametrize(
    ("plan", "steps", "actions"),
    [
        (PLAN, [Sig(signal.SIGUSR1), Sig(signal.SIGUSR2)], [(Signal(signal.SIGUSR1),), (Signal(signal.SIGUSR2),)]),
        (PLAN, [Sig(signal.SIGQUIT)], [(RequestStacks(),)]),
        (
            PLAN,
            [Ev(0, _exit(0)), Sig(signal.SIGQUIT), Sig(signal.SIGUSR1)],
            [(STOP_RANK,), (), (Signal(signal.SIGUSR1),)],
        ),
        (
            with_launcher(PLAN, "openmpi"),
            [Sig(signal.SIGQUIT)],
            [(Say("dslaunch: stacks on demand are not available with --launcher openmpi"),)],
        ),
    ],
    ids=["usr1-usr2-forwarded", "quit-asks-stacks", "no-stacks-while-stopping", "no-stacks-under-mpirun"],
)
def test_signals_that_do_not_stop_the_job(
    plan: LaunchPlan, steps: list[Step], actions: list[tuple[Action, ...]]
) -> None:
    state, got = _run(steps, plan)
    assert got == actions
    assert state.outcome().signal is None


def _stacks(node: int, *ranks: tuple[int, str, int, float]) -> Ev:
    return Ev(node, wire.Stacks(node, "ab"[node], ranks))


IDLE = [Ev(0, wire.Idle(0, True, 2)), Tick(1.0), Ev(1, wire.Idle(1, True, 2)), Tick(2.0)]
DECLARED = Say("dslaunch: hang: no rank made progress for 5 s: asking every rank for its stack")


def test_a_hang_is_declared_when_every_node_is_idle_and_settled_once_all_reported() -> None:
    steps: list[Step] = [
        *IDLE,
        _stacks(0, (0, "collective", 4, 6.0), (1, "collective", 4, 6.0)),
        Tick(3.0),  # node 1 has not reported: wait
        _stacks(1, (2, "running", 4, 6.0), (3, "collective", 4, 6.0)),
        Tick(3.1),
        Tick(3.2),
    ]
    state, got = _run(steps, HANGS)
    assert got == [(), (), (), (DECLARED, RequestStacks()), (), (), (), (StopAll("hang"),), ()]
    outcome = state.outcome()
    assert outcome.code == hang.HANG_EXIT
    assert outcome.hang is not None and outcome.hang.culprits == ((2, "b"),)
    assert cause_line(outcome) == "hang: no progress for 5 s (least progress: rank 2)"


def test_a_hang_settles_after_report_wait_without_every_report() -> None:
    steps: list[Step] = [*IDLE, _stacks(0, (0, "running", 1, 6.0)), Tick(2.0 + hang.REPORT_WAIT)]
    state, got = _run([*steps, Tick(2.0 + hang.REPORT_WAIT + 0.01)], HANGS)
    assert got[-2:] == [(), (StopAll("hang"),)]
    outcome = state.outcome()
    assert outcome.code == 124 and outcome.hang is not None and outcome.hang.unreported == (1,)


def test_progress_again_or_no_hang_timeout_is_no_hang() -> None:
    steps: list[Step] = [*IDLE[:3], Ev(0, wire.Idle(0, False, 2)), Tick(2.0)]
    assert _run(steps, HANGS)[1][-1] == ()
    assert _run(IDLE, PLAN)[1][-1] == ()


def test_no_hang_is_declared_while_stopping() -> None:
    _state, got = _run([IDLE[0], Ev(0, _exit(0)), *IDLE[1:]], HANGS)
    assert all(not isinstance(a, (Say, RequestStacks)) for actions in got for a in actions)


def test_under_mpirun_a_hang_is_said_and_stops_the_job_at_once() -> None:
    state, got = _run(IDLE, MPI_HANGS)
    declared = Say("dslaunch: hang: no rank made progress for 5 s: stopping the job")
    assert got[-1] == (declared, StopAll("hang"))
    assert state.outcome().hang is not None and state.outcome().code == 124


@pytest.mark.parametrize(("status", "code"), [(-9, 137), (-15, 143), (None, 137), (0, 1), (5, 5)])
def test_a_lost_nodes_status_becomes_the_exit_code(status: int | None, code: int) -> None:
    assert lost_node_code(status) == code
    assert _run([End(0, status)])[0].outcome().code == code


def test_the_summary_of_outcomes_the_state_makes() -> None:
    outcome = _run([Sig(signal.SIGTERM)])[0].outcome()
    assert format_summary(outcome, PLAN) == (
        "dslaunch: stopped by SIGTERM (exit 143); 0 of 4 ranks exited 0\n  4 rank(s) reported no exit"
    )
    assert cause_line(outcome) == "stopped by SIGTERM (requested)"
    during = _run([Ev(0, _exit(0, 1)), Sig(signal.SIGTERM)])[0].outcome()
    assert format_summary(during, PLAN).startswith("dslaunch: received SIGTERM; stopped all 4 ranks (exit 143)")
    lost = _run([End(1, -9)])[0].outcome()
    assert cause_line(lost) == "node 1 (b) disappeared"
    failed = _run([Ev(0, _exit(2, 3)), Ev(0, _exit(0, 143, by_agent=True))])[0].outcome()
    assert cause_line(failed) == "rank 2 on b exited with code 3"
    assert format_summary(failed, PLAN) == (
        "dslaunch: job failed: rank 2 (local_rank 0, node 1) on host b exited with code 3 [root cause: first failure]"
        "\ndslaunch: 1 other rank(s) were stopped because of it"
    )
    assert format_summary(Outcome(0), PLAN) is None and cause_line(Outcome(0)) == ""
    assert cause_line(_run([Ev(1, wire.Done(1, 2))])[0].outcome()) == "a node agent failed with exit code 2"


# ---- one stop step for the whole job (job/stop_gather.py, docs/stopping.md) -------------------------------------
def test_a_requested_stop_is_answered_with_the_largest_stop_step_once_every_node_proposed() -> None:
    steps: list[Step] = [
        Ev(1, wire.StopAsked(1, signal.SIGTERM, 1000.5)),
        Ev(1, wire.StopStep(1, 12)),
        Ev(0, wire.StopStep(0, 14)),
        Tick(1.0),
        Ev(0, wire.StopStep(0, 20)),
    ]
    _state, got = _run(steps)
    assert got == [(RequestStop(signal.SIGTERM),), (), (StopAt(14),), (), ()]  # one answer only
    _state, got = _run([Sig(signal.SIGTERM), Ev(0, wire.StopStep(0, None)), Ev(1, wire.Done(1, 0)), End(1, None)])
    assert got == [(RequestStop(signal.SIGTERM),), (), (), (StopAt(1),)]  # node 1 ended: no answer from it


def test_a_failures_teardown_asks_no_stop_step_but_answers_an_agent_that_proposes_one() -> None:
    _state, got = _run([Ev(0, _exit(0)), Ev(1, wire.StopStep(1, 8), now=1.0), Tick(5.9), Tick(6.0)])
    assert got == [(STOP_RANK,), (), (), (StopAt(8),)]  # node 0 never answers: the bound (job/stop_gather.py)


def test_a_pod_that_is_not_the_coordinator_never_answers_a_stop_step() -> None:
    state = JobState(PLAN, NODES, decides_stop_step=False)
    assert state.on_event(0, wire.StopStep(0, 3), 0.0) == ()
    assert state.tick(6.0) == () and state.on_event(1, wire.StopStep(1, 4), 6.0) == ()


def test_a_launcher_of_one_node_of_many_answers_its_node_alone() -> None:
    """A Slurm task's launcher supervises its own node of the plan's two: it waits for no other (docs/stopping.md)."""
    state = JobState(PLAN, ((1, "b"),))
    assert state.on_event(0, wire.StopAsked(1, signal.SIGTERM, 1.0), 0.0) == (RequestStop(signal.SIGTERM),)
    assert state.on_event(0, wire.StopStep(1, 6), 0.0) == (StopAt(6),)


GLOO_RESET = (
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:1448: Connection "
    "reset by peer. This is typically caused by a remote worker hanging or bugs in the application."
)


def _peer_gone(rank: int, ts: float) -> RankExit:
    return replace(_exit(rank, 1, ts=ts), error=f"Traceback (most recent call last):\n{GLOO_RESET}\n")


@pytest.mark.parametrize(
    ("exits", "cause"),
    [
        # the rank that exited at once closed its sockets before it was a zombie: its peer's failure is dated first
        ([_peer_gone(2, 1.0), _exit(3, 7, ts=1.2)], 3),
        ([_exit(3, 7, ts=1.2), _peer_gone(2, 1.0)], 3),
        ([_peer_gone(2, 1.0), _peer_gone(0, 0.9)], 0),  # only consequences: the earliest
        ([_exit(1, 5, ts=2.0), _exit(3, 7, ts=1.5)], 3),  # failures of their own: the earliest
    ],
)
def test_a_rank_that_failed_on_its_own_is_the_root_cause_before_one_whose_peer_went(
    exits: list[RankExit], cause: int
) -> None:
    state = JobState(PLAN, NODES)
    for event in exits:
        state.on_event(event.node_rank, event, 0.0)
    assert state.outcome().root_cause is not None and state.outcome().root_cause.rank == cause


def test_peer_gone_reads_the_error_and_the_stderr_tail() -> None:
    assert peer_gone(*_texts(_peer_gone(1, 1.0)))
    nccl = replace(_exit(1), stderr_tail=("x", "NCCL error: remote process exited or there was a network error"))
    assert peer_gone(*_texts(nccl))
    assert not peer_gone(*_texts(replace(_exit(1), error="ValueError: bad config")))


def _texts(event: RankExit) -> tuple[str | None, tuple[str, ...]]:
    return event.error, event.stderr_tail


def test_failed_after_is_from_the_start_to_the_first_rank_failing_on_its_own() -> None:
    """--repeat-window reads it: a rank the agent stopped does not count, nor does a later failure."""
    state = JobState(PLAN, NODES, started=100.0)
    for now, event in ((101.0, _exit(0, 143, by_agent=True)), (102.5, _exit(2, 7)), (103.0, _exit(1, 1, ts=0.1))):
        state.on_event(0, event, now)
    assert state.outcome().failed_after == 2.5 and state.outcome().root_cause.rank == 1  # type: ignore[union-attr]
    assert _run(DONE_OK)[0].outcome().failed_after is None
