"""Stacks on demand (SIGQUIT) and --hang-timeout with trivial Python ranks (no torch); docs/hangs.md."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli
from tests.job.hang_watch import Job
from tests.output.collapse_check import lines_of
from tests.plans import cli_error

SCRIPT = str(SCRIPTS / "waiter.py")


def _said(text: str, line: str) -> int:
    """How many ranks printed ``line`` (identical lines of several ranks print once, with a rank range)."""
    return sum(len(ranks) for ranks in lines_of(text, line))


def _stack_lines(text: str, rank: int, function: str) -> int:
    return len(re.findall(rf"^\[rank{rank}\]:   File \".*\", line \d+ in {function}$", text, re.M))


@pytest.mark.launch
def test_ctrl_backslash_prints_every_stack_once_and_the_job_goes_on(tmp_path: Path) -> None:
    """SIGQUIT to the launcher's whole process group (what Ctrl-\\ does: launcher and forked agents) prints each
    rank's stack once, with its prefix; the ranks then finish and the job exits 0."""
    job = Job(["--nproc-per-node", "3", "--master-port", "0", SCRIPT, "wait", str(tmp_path)])
    assert job.wait_for(lambda t: _said(t, "ready") == 3, 30), job.text
    os.killpg(job.proc.pid, signal.SIGQUIT)
    assert job.wait_for(lambda t: all(_stack_lines(t, r, "waiting_here") for r in range(3)), 10), job.text
    assert job.proc.poll() is None, job.text
    (tmp_path / "go").touch()
    assert job.wait(30) == 0, job.text
    for rank in range(3):
        assert _stack_lines(job.text, rank, "waiting_here") == 1, job.text  # once: the agent merges the two asks
        assert _stack_lines(job.text, rank, "<module>") >= 1, job.text
        assert re.search(rf"^\[rank{rank}\]: (Current thread|Thread) 0x[0-9a-f]+", job.text, re.M), job.text


@pytest.mark.launch
def test_no_python_ranks_are_named_as_unable(tmp_path: Path) -> None:
    go = tmp_path / "go"
    loop = f"echo ready; while [ ! -e {go} ]; do sleep 0.05; done"
    job = Job(["--nproc-per-node", "2", "--master-port", "0", "--no-python", "/bin/sh", "-c", loop])
    assert job.wait_for(lambda t: _said(t, "ready") == 2, 30), job.text
    job.proc.send_signal(signal.SIGQUIT)
    named = "dslaunch: --no-python rank: it cannot print a Python stack"
    assert job.wait_for(lambda t: all(f"[rank{r}]: {named}" in t for r in range(2)), 10), job.text
    go.touch()
    assert job.wait(30) == 0, job.text


@pytest.mark.launch
@pytest.mark.parametrize("mode", ["print", "beat"])
def test_output_and_heartbeats_are_progress(mode: str) -> None:
    """Ranks that write output (or only call dslaunch.heartbeat()) every 0.4 s outlive a 1.5 s --hang-timeout."""
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", "--hang-timeout", "1.5", SCRIPT, mode, "4"])
    assert result.returncode == 0, result.stderr
    assert "hang" not in result.stderr, result.stderr


@pytest.mark.launch
def test_hang_names_the_rank_with_the_fewest_heartbeats_from_the_config(tmp_path: Path) -> None:
    """config hang_timeout; no progress at all: every stack is printed, the rank with the fewest heartbeats is
    named, and the job exits 124 soon after the timeout."""
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"hang_timeout": 1.5}))
    job = Job(["--nproc-per-node", "3", "--master-port", "0", "--config", str(config), SCRIPT, "silent", "3,1,2"])
    assert job.wait(30) == 124, job.text
    took = (job.ended or 0) - job.started
    assert took < 1.5 + 4, f"{took:.1f} s"
    for rank in range(3):
        assert _stack_lines(job.text, rank, "stuck_here") == 1, job.text
    assert "dslaunch: hang: no rank made progress for 1.5 s; least progress: rank 1 (host localhost) " in job.text
    assert "(exit 124)" in job.text


@pytest.mark.parametrize(
    ("args", "config"),
    [
        (["--hang-timeout", "0"], None),
        (["--hang-timeout", "-1"], None),
        (["--hang-timeout", "nan"], None),
        (["--hang-timeout", "inf"], None),
        (["--hang-timeout", "soon"], None),
        ([], 0),
        ([], "5"),
        ([], float("nan")),
        ([], True),
    ],
)
def test_bad_hang_timeouts_stop_the_launch(args: list[str], config: object, tmp_path: Path) -> None:
    if config is not None:
        path = tmp_path / "ds.json"
        path.write_text(json.dumps({"hang_timeout": config}))
        args = [*args, "--config", str(path)]
    code, err = cli_error(["--dry-run", *args, "--nproc-per-node", "1", sys.executable])
    assert code == 2, err
    assert "hang" in err.lower(), err


@pytest.mark.launch
def test_a_hang_is_a_failure_that_restarts_retry(tmp_path: Path) -> None:
    """Attempt 0 hangs after one heartbeat; with --max-restarts 1 the job is started again and ends 0."""
    script = tmp_path / "hang_once.py"
    script.write_text(
        "import os, time, dslaunch\n"
        "dslaunch.heartbeat()\n"
        "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
        "    time.sleep(60)\n"
    )
    started = time.monotonic()
    res = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--hang-timeout", "1.5", "--max-restarts", "1",
         "--restart-delay", "0", str(script)],
        timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert time.monotonic() - started < 20
    assert "attempt 1: exit 124: hang: no progress for 1.5 s" in res.stderr
    assert "attempt 2: exit 0: succeeded" in res.stderr
