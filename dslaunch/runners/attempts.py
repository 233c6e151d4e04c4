"""Restarts: run the plan, and while an attempt fails and restarts are left, wait and run it again.

Every runner tears the whole job down on every node before it returns, so an
attempt is always a fresh start of every rank with the same plan (same run id,
a new attempt number in ``TORCHELASTIC_RESTART_COUNT``). A signal to dslaunch
ends the job, whether it comes during an attempt or during the delay.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dslaunch.plan import LaunchPlan
from dslaunch.runners.result import JobResult

if TYPE_CHECKING:
    from dslaunch.runners import Runner

_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_attempts(runner: Runner, plan: LaunchPlan) -> int:
    """Run ``plan`` up to ``1 + max_restarts`` times; the exit code is the last attempt's."""
    results: list[JobResult] = []
    limit = plan.restarts.max_restarts
    while True:
        count = len(results)
        result = runner.run(plan.attempt(count))
        results.append(result)
        if not result.failed or not result.retry or count >= limit:
            break
        with _stop_signals_caught() as caught:  # before the notice: a Ctrl-C right after it must be ours
            _say(
                f"dslaunch: attempt {count + 1} of {limit + 1} failed ({result.cause or f'exit {result.code}'}); "
                f"restarting every rank in {plan.restarts.delay:g} s"
            )
            signum = _sleep_unless_signalled(plan.restarts.delay, caught)
        if signum is not None:
            _say(f"dslaunch: received {signal.Signals(signum).name} while waiting to restart; not restarting")
            return 128 + signum
    if len(results) > 1:
        _say(attempts_summary(results, limit))
    return results[-1].code


def attempts_summary(results: list[JobResult], limit: int) -> str:
    """One line per attempt, with its cause: what the user reads after a job that was restarted."""
    lines = [f"dslaunch: the job ran {len(results)} times (--max-restarts {limit}):"]
    for number, result in enumerate(results, 1):
        what = "succeeded" if not result.failed else result.cause or "failed"
        lines.append(f"  attempt {number}: exit {result.code}: {what}")
    return "\n".join(lines)


@contextmanager
def _stop_signals_caught() -> Iterator[list[int]]:
    """SIGINT/SIGTERM/SIGHUP are recorded (in the list given) instead of acted on, while in the block."""
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _f: caught.append(signum)) for s in _STOP_SIGNALS}
    try:
        yield caught
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _sleep_unless_signalled(seconds: float, caught: list[int]) -> int | None:
    """Wait ``seconds``; a stop signal (recorded in ``caught``) ends the wait at once and is returned."""
    deadline = time.monotonic() + seconds
    while not caught and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    return caught[0] if caught else None


def _say(text: str) -> None:
    from dslaunch.agent.sink import write_within
    from dslaunch.logs import file_record

    file_record("launcher", "restart", text=text)
    sys.stdout.flush()
    write_within(2, (text + "\n").encode(), 0.5)
