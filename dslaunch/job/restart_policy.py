"""Whether another attempt may run (pure): the one place the restart budget is decided.

Every launcher that numbers attempts asks here: ``job/attempts.py::run_attempts`` (one launcher for the job) and
the pods' coordinator and members (``pods/pod_launcher.py``, one launcher per pod). Slurm's node mode restarts inside
its task through ``run_attempts`` too. The decision sees every attempt of the job so far, so a rule that looks
back belongs here as well: a failure that repeats the same way before the first step, and ``--no-restart-on``.

A failure that comes back the same way before any rank reached a step (the same rank, the same exit code and the
same exception type and message, in two attempts in a row) is deterministic: a bad import, a missing file, a bad
config. A third attempt would fail the same way, so the job ends with it and says why (docs/restarts.md).

"Before any step" is known only of a script that makes progress beats. A job none of whose ranks has made one (a
script written for torchrun: no ``dslaunch.engine()``, no ``dslaunch.heartbeat()``) may fail hours into training,
so there only failures within ``--repeat-window`` seconds of their attempt's start are compared: the early ones
that a bad import or a missing file make.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dslaunch.job.result import JobResult, RankFailure
from dslaunch.plan import Restarts

EXCEPTION_CHARS = 200  # of an exception's text in the line that names a repeat


@dataclass(frozen=True)
class Verdict:
    """May another attempt run, and if not, why not (one line; empty after a success)."""

    restart: bool
    why: str = ""
    # The why is news to the user (a repeat, --no-restart-on): the launcher that decides prints it, once, as
    # "dslaunch: not restarting: <why>". The budget's and a stop's are in the attempts' summary already.
    say: bool = False


def attempt_number(results: Sequence[JobResult]) -> int:
    """The job's number (0 the first) of the last attempt in ``results``: the runner's, where it knows it better."""
    last = results[-1]
    return len(results) - 1 if last.attempt is None else last.attempt


def may_restart(results: Sequence[JobResult], restarts: Restarts, no_restart_on: tuple[int, ...] = ()) -> Verdict:
    """After the attempts ``results`` (the job's so far, the last one just ended), may the next one run?
    ``no_restart_on``: the plan's ``--no-restart-on`` codes."""
    last = results[-1]
    if not last.failed:
        return Verdict(False)
    if not last.retry or last.stopped_by is not None:  # a requested stop never restarts (docs/stopping.md)
        return Verdict(False, "this attempt must not be restarted")
    used = attempt_number(results) + 1
    if used > restarts.max_restarts:
        return Verdict(False, budget_spent(used, restarts))
    listed = next((f for f in last.failures if f.code in no_restart_on), None)
    if listed is not None:
        return Verdict(False, f"{_who(listed)} exited with code {listed.code}, which --no-restart-on lists", say=True)
    repeated = _repeated(results, restarts.repeat_window)
    return Verdict(False, repeated, say=True) if repeated else Verdict(True)


def _repeated(results: Sequence[JobResult], repeat_window: float) -> str | None:
    """Why the last two attempts failed the same way before the first step; None when they did not."""
    if len(results) < 2 or repeat_window <= 0:
        return None
    # A job that made a beat is known to make them: an attempt without one failed before its first step, however
    # late; without any, only an early failure is taken for one (--repeat-window).
    window = None if any(r.stepped for r in results) else repeat_window
    if not repeats(results[-2], results[-1], window):
        return None
    return repeat_line(results[-1].failures[0], attempt_number(results) + 1, window)


def may_start(attempt: int, restarts: Restarts) -> Verdict:
    """May the job's attempt number ``attempt`` (0 the first) start at all: a coordinator recreated in the middle
    of a job goes on counting, and finds the budget spent when every allowed attempt has run."""
    if attempt > restarts.max_restarts:
        return Verdict(False, budget_spent(attempt, restarts))
    return Verdict(True)


def budget_spent(used: int, restarts: Restarts) -> str:
    return f"the job has run {used} attempt(s), all --max-restarts {restarts.max_restarts} allows"


def repeats(before: JobResult, after: JobResult, window: float | None = None) -> bool:
    """Whether ``after`` failed the way ``before`` did, both before any rank reached a step: the same root-cause
    rank, exit code and exception (or none in both). ``window``: both failures must also have come within this
    many seconds of their attempt's start (None: whenever they came)."""
    if before.stepped or after.stepped or not before.failures or not after.failures:
        return False
    if window is not None and not (_early(before, window) and _early(after, window)):
        return False
    if None not in (before.attempt, after.attempt) and after.attempt != (before.attempt or 0) + 1:
        return False  # not in a row: a pod that sat out the attempt between
    first, second = before.failures[0], after.failures[0]
    return (first.rank, first.code, first.exception) == (second.rank, second.code, second.exception)


def repeat_line(failure: RankFailure, number: int, window: float | None = None) -> str:
    """Why a job ends on a repeat; ``number``: the attempt that repeated it, as people count (1 the
    first); ``window``: the --repeat-window that both failures came within (None: it did not apply)."""
    what = _shown(failure.exception) if failure.exception else f"exit code {failure.code}"
    early = "" if window is None else f", within {window:g} s of their start (--repeat-window),"
    return (
        f"{_who(failure)} failed the same way in attempts {number - 1} and {number}{early} before any rank reached "
        f"a step ({what}); another attempt would fail the same way"
    )


def _early(result: JobResult, window: float) -> bool:
    return result.failed_after is not None and result.failed_after <= window


def exception_of(error: str | None) -> str | None:
    """The exception's type and message from a traceback text: the lines after its last frame (a chained
    exception's last, the one that ended the rank); a text that is no traceback, whole. None for none."""
    if not error or not error.strip():
        return None
    lines = error.rstrip("\n").split("\n")
    if not lines[0].startswith("Traceback"):
        return error.strip()
    last_frame = max((i for i, line in enumerate(lines) if line[:1].isspace()), default=0)
    return "\n".join(lines[last_frame + 1 :]).strip() or None


def _who(failure: RankFailure) -> str:
    return f"rank {failure.rank} on {failure.host}"


def _shown(exception: str) -> str:
    one_line = " / ".join(line.strip() for line in exception.splitlines() if line.strip())
    return one_line if len(one_line) <= EXCEPTION_CHARS else one_line[: EXCEPTION_CHARS - 3] + "..."
