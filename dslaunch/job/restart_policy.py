"""Whether another attempt may run (pure): the one place the restart budget is decided.

Every launcher that numbers attempts asks here: ``job/attempts.py::run_attempts`` (one launcher for the job) and
the pods' coordinator and members (``pods/attempts.py``, one launcher per pod). Slurm's node mode restarts inside
its task through ``run_attempts`` too. The decision sees every attempt of the job so far, so a rule that looks
back (a failure that repeats) belongs here as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dslaunch.job.result import JobResult
from dslaunch.plan import Restarts


@dataclass(frozen=True)
class Verdict:
    """May another attempt run, and if not, why not (one line; empty after a success)."""

    restart: bool
    why: str = ""


def attempt_number(results: Sequence[JobResult]) -> int:
    """The job's number (0 the first) of the last attempt in ``results``: the runner's, where it knows it better."""
    last = results[-1]
    return len(results) - 1 if last.attempt is None else last.attempt


def may_restart(results: Sequence[JobResult], restarts: Restarts) -> Verdict:
    """After the attempts ``results`` (the job's so far, the last one just ended), may the next one run?"""
    last = results[-1]
    if not last.failed:
        return Verdict(False)
    if not last.retry:
        return Verdict(False, "this attempt must not be restarted")
    used = attempt_number(results) + 1
    if used > restarts.max_restarts:
        return Verdict(False, budget_spent(used, restarts))
    return Verdict(True)


def may_start(attempt: int, restarts: Restarts) -> Verdict:
    """May the job's attempt number ``attempt`` (0 the first) start at all: a coordinator recreated in the middle
    of a job goes on counting, and finds the budget spent when every allowed attempt has run."""
    if attempt > restarts.max_restarts:
        return Verdict(False, budget_spent(attempt, restarts))
    return Verdict(True)


def budget_spent(used: int, restarts: Restarts) -> str:
    return f"the job has run {used} attempt(s), all --max-restarts {restarts.max_restarts} allows"
