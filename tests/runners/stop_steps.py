"""Shared by the stop-step tests of every runner: lockstep ranks (tests/scripts/stop_step_ranks.py, or the torch
one) that call should_stop() once a step and write the step they stopped at; a stop is asked for once each rank has
run a few steps."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.helpers import DSLAUNCH, SCRIPTS

RANKS = str(SCRIPTS / "stop_step_ranks.py")
TORCH_RANKS = str(SCRIPTS / "stop_step_torch.py")


def start(args: Sequence[str], out: Path, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """``dslaunch ARGS`` with OUT_DIR=out, in a session of its own (a Ctrl-C can go to its whole group); a free
    master port unless ARGS name one (CI: 29500 was another test's job's, and the launcher refused it)."""
    full = {**os.environ, "OUT_DIR": str(out), **(env or {})}
    port = [] if "--master-port" in args else ["--master-port", "0"]
    return subprocess.Popen(
        [*DSLAUNCH, *port, *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_ready(out: Path, ranks: Sequence[int], proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all((out / f"ready.{rank}").exists() for rank in ranks):
        if proc.poll() is not None:
            raise AssertionError(
                f"dslaunch ended ({proc.returncode}) before the ranks were ready: {proc.communicate()}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"ranks not ready within {timeout} s: {proc.communicate()}")
        time.sleep(0.05)


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"dslaunch did not end within {timeout} s: {stderr}") from None
    return proc.returncode, stdout, stderr


def saved(out: Path, ranks: Sequence[int]) -> dict[int, str]:
    """What each rank that saved wrote: its stop step (and, for torch ranks, the allreduced sum)."""
    return {rank: (out / f"saved.{rank}").read_text().strip() for rank in ranks if (out / f"saved.{rank}").exists()}


def stop_and_check(
    proc: subprocess.Popen[str], out: Path, ranks: Sequence[int], ask: Callable[[], None], *, code: int = 143
) -> str:
    """Ask for the stop once every rank is ready; every rank saves one and the same step; the job exits ``code``.
    Returns the step."""
    wait_ready(out, ranks, proc)
    ask()
    returncode, _stdout, stderr = finish(proc)
    got = saved(out, ranks)
    assert sorted(got) == list(ranks), f"not every rank saved: {got}\n{stderr}"
    assert len(set(got.values())) == 1, f"ranks saved different steps: {got}\n{stderr}"
    assert returncode == code, stderr
    return next(iter(got.values()))
