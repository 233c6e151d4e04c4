"""The one restart decision (job/restart_policy.py), as a table: every launcher that numbers attempts asks it."""

from __future__ import annotations

import pytest

from dslaunch.job.restart_policy import attempt_number, may_restart, may_start
from dslaunch.job.result import JobResult, stopped
from dslaunch.plan import Restarts

FAIL = JobResult(1, "rank 0 exited with code 1")


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
