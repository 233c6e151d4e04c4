"""The issue's case with real torch ranks: rank 2 sleeps in stuck_here() while the others wait in a gloo all_reduce."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS
from tests.job.hang_watch import Job
from tests.output.collapse_check import lines_of

pytestmark = [pytest.mark.torch, pytest.mark.launch]
SCRIPT = str(SCRIPTS / "stuck.py")
TIMEOUT = 5.0


def _said(text: str, line: str) -> int:
    """How many ranks printed ``line`` (identical lines of several ranks print once, with a rank range)."""
    return sum(len(ranks) for ranks in lines_of(text, line))


def _stacks(text: str, rank: int) -> int:
    return len(re.findall(rf"^\[rank{rank}\]: (?:Current thread|Thread) 0x[0-9a-f]+", text, re.M))


def test_sigquit_then_hang_timeout_names_rank_2(tmp_path: Path) -> None:
    env = {"DSLAUNCH_PG_TIMEOUT": "40", "CUDA_VISIBLE_DEVICES": "", "STUCK_FOR": "40"}
    job = Job(["--nproc-per-node", "4", "--master-port", "0", "--hang-timeout", str(TIMEOUT), SCRIPT], env=env)
    assert job.wait_for(lambda t: _said(t, "ready sum=64") == 4, 120), job.text

    # SIGQUIT: every rank's stack, and the job goes on
    job.proc.send_signal(signal.SIGQUIT)
    in_stuck = re.compile(r'^\[rank2\]:   File ".*stuck\.py", line \d+ in stuck_here$', re.M)
    assert job.wait_for(lambda t: len(in_stuck.findall(t)) == 1 and all(_stacks(t, r) for r in range(4)), 10), job.text
    asked = job.lines[-1][0]
    assert job.proc.poll() is None, job.text

    # nothing moves: --hang-timeout prints them again and fails the job
    assert job.wait(60) == 124, job.text
    assert job.ended is not None
    last_progress = max(when for when, line in job.lines if "ready sum=64" in line)
    took = job.ended - max(last_progress, asked)
    assert took < TIMEOUT + 4, f"ended {took:.1f} s after the last progress"
    text = job.text
    assert len(in_stuck.findall(text)) == 2, text
    for rank in range(4):
        assert _stacks(text, rank) >= 2, text
    for rank in (0, 1, 3):
        assert re.search(rf'^\[rank{rank}\]:   File ".*torch/distributed/.*", line \d+ in all_reduce$', text, re.M)
    assert (
        f"dslaunch: hang: no rank made progress for {TIMEOUT:g} s; least progress: rank 2 (host localhost) "
        "[not in the collective the others wait in]; stopped all 4 ranks (exit 124)"
    ) in text, text
    assert "flight recorder" not in text, text  # gloo: no NCCL trace to dump or name
    print(f"hang to exit: {took:.2f} s after the last progress")
