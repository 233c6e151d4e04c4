"""The one restart decision (job/restart_policy.py), as tables: every launcher that numbers attempts asks it. The
budget, --no-restart-on, and a failure that repeats the same way before any step (for a job without progress
beats, only within --repeat-window of its attempt's start)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.job.restart_policy import attempt_number, exception_of, may_restart, may_start, repeats
from dslaunch.job.result import JobResult, RankFailure, stopped
from dslaunch.plan import Restarts

FAIL = JobResult(1, "rank 0 exited with code 1")
IMPORT = "ModuleNotFoundError: No module named 'nosuch'"
TRACEBACK = f'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    import nosuch\n{IMPORT}\n'


def _failed(
    rank: int = 1,
    code: int = 1,
    exception: str | None = IMPORT,
    *,
    stepped: bool = False,
    attempt: int | None = None,
    after: float | None = 2.0,
) -> JobResult:
    """A rank's own failure, ``after`` seconds into its attempt (early: within the default --repeat-window)."""
    failure = RankFailure(rank, "w1", code, exception)
    return JobResult(
        code, f"rank {rank} failed", failures=(failure,), stepped=stepped, attempt=attempt, failed_after=after
    )


OK = JobResult(0)
LOST = JobResult(1, "node 1 disappeared")  # no rank failed on its own: nothing to compare
STOPPED = JobResult(143, "dslaunch received SIGTERM", retry=False)
REPEAT = (  # no rank of the job made a beat: the failures were compared as both came within the window
    "rank 1 on w1 failed the same way in attempts 1 and 2, within 300 s of their start (--repeat-window), before "
    f"any rank reached a step ({IMPORT}); another attempt would fail the same way"
)
BEATEN = (  # a rank made a beat in an earlier attempt: the job makes them, so no window
    "rank 1 on w1 failed the same way in attempts 2 and 3 before any rank reached a step "
    f"({IMPORT}); another attempt would fail the same way"
)
LISTED = "rank 1 on w1 exited with code 3, which --no-restart-on lists"


@pytest.mark.parametrize(
    ("results", "max_restarts", "restart", "why"),
    [
        ([JobResult(0)], 3, False, ""),
        ([FAIL], 0, False, "the job has run 1 attempt(s), all --max-restarts 0 allows"),
        ([FAIL], 1, True, ""),
        ([FAIL, FAIL], 1, False, "the job has run 2 attempt(s), all --max-restarts 1 allows"),
        ([FAIL, FAIL], 2, True, ""),
        ([stopped(130, "received SIGINT")], 5, False, "this attempt must not be restarted"),
        ([FAIL, JobResult(0)], 5, False, ""),
        # the runner's own number counts (one launcher per pod: a pod that joined the job's third attempt)
        ([JobResult(1, attempt=2)], 2, False, "the job has run 3 attempt(s), all --max-restarts 2 allows"),
        ([JobResult(1, attempt=1)], 2, True, ""),
    ],
)
def test_may_restart(results: list[JobResult], max_restarts: int, restart: bool, why: str) -> None:
    verdict = may_restart(results, Restarts(max_restarts=max_restarts))
    assert (verdict.restart, verdict.why) == (restart, why)


def test_attempt_number_is_the_runners_where_it_knows_it() -> None:
    assert attempt_number([FAIL, FAIL]) == 1
    assert attempt_number([FAIL, JobResult(1, attempt=4)]) == 4


@pytest.mark.parametrize(
    ("attempt", "max_restarts", "allowed"), [(0, 0, True), (1, 0, False), (2, 2, True), (3, 2, False)]
)
def test_may_start_counts_the_jobs_attempts(attempt: int, max_restarts: int, allowed: bool) -> None:
    verdict = may_start(attempt, Restarts(max_restarts=max_restarts))
    assert verdict.restart is allowed
    assert bool(verdict.why) is not allowed


@pytest.mark.parametrize(
    ("results", "limit", "codes", "restart", "said"),
    [
        ([OK], 5, (), False, None),
        ([STOPPED], 5, (), False, None),
        ([_failed()], 0, (), False, None),  # the budget: no restart at all
        ([_failed()], 5, (), True, None),  # one failure is no repeat
        ([_failed(), _failed()], 5, (), False, REPEAT),
        ([_failed(), _failed()], 1, (), False, None),  # the budget ends it first: no repeat line
        ([_failed(), _failed(stepped=True)], 5, (), True, None),  # a step was reached in the second
        ([_failed(stepped=True), _failed()], 5, (), True, None),  # ... or in the first
        ([_failed(), _failed(rank=2)], 5, (), True, None),  # another rank
        ([_failed(), _failed(code=2)], 5, (), True, None),  # another exit code
        ([_failed(), _failed(exception="RuntimeError: flaky 1")], 5, (), True, None),  # another message
        ([_failed(exception=None), _failed()], 5, (), True, None),  # an exception in one only
        ([_failed(), LOST, _failed()], 5, (), True, None),  # not in a row
        ([_failed(), _failed(), _failed()], 5, (), False, REPEAT.replace("1 and 2", "2 and 3")),
        ([LOST, LOST], 5, (), True, None),  # lost nodes are left to the budget
        ([_failed(code=3)], 5, (3, 4), False, LISTED),
        ([_failed(code=3, stepped=True)], 5, (3,), False, LISTED),  # after a step too
        ([_failed(code=3, stepped=True)], 5, (4,), True, None),
        ([STOPPED], 5, (143,), False, None),  # a stop is no rank's failure
        ([_failed(attempt=2), _failed(attempt=4)], 9, (), True, None),  # a pod that sat out attempt 3: not in a row
    ],
)
def test_the_rules_that_look_back(
    results: list[JobResult], limit: int, codes: tuple[int, ...], restart: bool, said: str | None
) -> None:
    verdict = may_restart(results, Restarts(max_restarts=limit), codes)
    assert verdict.restart is restart
    assert (verdict.why if verdict.say else None) == said


def test_the_repeat_line_counts_with_the_runners_attempt_numbers() -> None:
    """One launcher per pod: the coordinator passes the attempts it ran, numbered by the job."""
    verdict = may_restart([_failed(attempt=6), _failed(attempt=7)], Restarts(max_restarts=10))
    assert verdict.say and "in attempts 7 and 8, within 300 s" in verdict.why
    spent = may_restart([_failed(attempt=6), _failed(attempt=7)], Restarts(max_restarts=7))
    assert not spent.restart and not spent.say  # the job's budget is spent first


def test_exit_codes_alone_repeat() -> None:
    verdict = may_restart([_failed(code=7, exception=None)] * 2, Restarts(max_restarts=5))
    assert (
        "in attempts 1 and 2, within 300 s of their start (--repeat-window), before any rank reached a step "
        "(exit code 7)" in verdict.why
    )


LATE = 301.0  # seconds into an attempt: past the default --repeat-window (300)


@pytest.mark.parametrize(
    ("results", "window", "said"),
    [
        ([_failed(), _failed()], 300.0, REPEAT),
        ([_failed(after=300.0), _failed(after=300.0)], 300.0, REPEAT),  # the window's edge is in it
        ([_failed(), _failed(after=LATE)], 300.0, None),  # hours of training, then the same NCCL error: restart
        ([_failed(after=LATE), _failed()], 300.0, None),  # ... or the first one late
        ([_failed(after=LATE), _failed(after=LATE)], 300.0, None),
        ([_failed(after=None), _failed()], 300.0, None),  # when it failed is not known: restart
        ([_failed(after=1.5), _failed(after=1.5)], 1.0, None),  # a small window, as the launch test gives
        ([_failed(after=0.5), _failed(after=1.0)], 1.0, REPEAT.replace("300 s", "1 s")),
        ([_failed(), _failed()], 0.0, None),  # 0: the rule is off
        ([_failed(stepped=True), _failed(), _failed()], 0.0, None),  # ... for a job that makes beats too
        # a rank made a beat in an earlier attempt: the job makes them, and no beat since means before the first
        # step, however late (a checkpoint that cannot load, after 20 minutes, twice)
        ([_failed(stepped=True), _failed(after=LATE), _failed(after=LATE)], 300.0, BEATEN),
        ([_failed(stepped=True), _failed(after=None), _failed(after=None)], 300.0, BEATEN),
        ([_failed(stepped=True), _failed(), _failed(stepped=True)], 300.0, None),  # a beat in the last: restart
    ],
)
def test_a_job_without_beats_compares_only_failures_within_the_repeat_window(
    results: list[JobResult], window: float, said: str | None
) -> None:
    verdict = may_restart(results, Restarts(max_restarts=9, repeat_window=window))
    assert verdict.restart is (said is None)
    assert (verdict.why if verdict.say else None) == said


ATTEMPTS = st.lists(
    st.builds(
        lambda stepped, after: _failed(stepped=stepped, after=after),
        st.booleans(),
        st.one_of(st.none(), st.floats(0.0, 1000.0)),
    ),
    min_size=2,
    max_size=5,
)


@given(ATTEMPTS, st.sampled_from([0.0, 1.0, 300.0]))
def test_a_repeat_without_beats_always_came_within_the_window(results: list[JobResult], window: float) -> None:
    """Any history of identical failures: a repeat is named only if the window is on, neither of the last two
    stepped, and, without a beat in the job, both came within the window."""
    verdict = may_restart(results, Restarts(max_restarts=9, repeat_window=window))
    before, last = results[-2], results[-1]
    beaten = any(r.stepped for r in results)
    early = all(r.failed_after is not None and r.failed_after <= window for r in (before, last))
    expected = window > 0 and not before.stepped and not last.stepped and (beaten or early)
    assert verdict.restart is not expected
    assert verdict.say is expected


def test_repeats_needs_a_failure_in_both() -> None:
    assert not repeats(JobResult(1), JobResult(1))
    assert repeats(_failed(), _failed())
    assert repeats(_failed(after=LATE), _failed(after=LATE))  # no window: whenever they came
    assert not repeats(_failed(after=LATE), _failed(after=LATE), 300.0)


@pytest.mark.parametrize(
    ("error", "exception"),
    [
        (None, None),
        ("", None),
        (TRACEBACK, IMPORT),
        ("Traceback (most recent call last):\nValueError: boom\n", "ValueError: boom"),
        (  # a message of several lines, and a caret line of Python 3.11+
            'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\n    f()\n    ^^^\n'
            "KeyError: 'a'\nsecond line\n",
            "KeyError: 'a'\nsecond line",
        ),
        (  # chained: the last exception is the one that ended the rank
            "Traceback (most recent call last):\n  File \"t.py\", line 1\nKeyError: 'a'\n\nDuring handling of the "
            'above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File "t.py", '
            "line 3\nRuntimeError: config\n",
            "RuntimeError: config",
        ),
        (
            "cannot start rank 1: ./x: No such file or directory\n",
            "cannot start rank 1: ./x: No such file or directory",
        ),
    ],
)
def test_exception_of(error: str | None, exception: str | None) -> None:
    assert exception_of(error) == exception
