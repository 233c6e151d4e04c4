"""A running job's state for --report: the status file's content, its one line, and a real job seen while it
runs and once it ended (observe/live.py, cli/report_option.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from dslaunch.observe import live
from dslaunch.observe.breakdown import RegionStats
from dslaunch.observe.figures import JobFigures
from tests.helpers import DSLAUNCH

SCRIPT = str(Path(__file__).parents[1] / "scripts" / "timed_ranks.py")


def _figures() -> JobFigures:
    f = JobFigures(started=100.0, state="running", attempt=1, restarts={"rank_failure": 1}, ranks=16, nodes=2)
    f.ranks_alive, f.step, f.step_rate = 16, 1234, 5.1
    f.regions = (
        RegionStats("step", 16, 0.19, 0.2, 0.21, 3, 0, "a"),
        RegionStats("forward", 16, 0.1, 0.105, 0.21, 5, 1, "b"),  # 0.105 s over the median: the slowest
        RegionStats("allreduce", 16, 0.01, 0.01, 0.04, 2, 0, "a"),  # 4x the median, but it waits for rank 5
    )
    return f


def test_the_line_says_step_rate_ranks_restarts_and_the_slowest_rank() -> None:
    status = live.snapshot(_figures(), 200.0, os.getpid())
    assert live.line(status, 200.4, alive=True) == (
        "running: attempt 2, step 1234 (5.10 steps/s), 16 of 16 ranks alive, 1 restarts, slowest rank 5 on b "
        "(forward 0.210 s, median 0.105 s); updated 0.4 s ago"
    )
    assert "is gone" in live.line(status, 300.0, alive=False)
    ended = {**status, "state": "succeeded"}
    assert "is gone" not in live.line(ended, 300.0, alive=False)


def test_the_file_is_written_whole_and_read_back(tmp_path: Path) -> None:
    status = live.snapshot(_figures(), 200.0, os.getpid())
    live.write(str(tmp_path), status)
    assert live.read(str(tmp_path)) == status
    assert (tmp_path / live.FILE).stat().st_mode & 0o077 == 0  # as private as the logs
    assert [p.name for p in tmp_path.iterdir()] == [live.FILE]  # no temporary file left
    assert live.launcher_alive(status)


@pytest.mark.parametrize("content", [b"", b"[1]", b"{", b'{"updated": "x"}', b"{" + b" " * (live.MAX_BYTES + 1)])
def test_a_damaged_file_is_no_state(tmp_path: Path, content: bytes) -> None:
    (tmp_path / live.FILE).write_bytes(content)
    assert live.read(str(tmp_path)) is None


def _report(log_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DSLAUNCH, "--report", str(log_dir)], capture_output=True, text=True, timeout=30)


@pytest.mark.launch
def test_report_on_a_running_job_shows_its_live_state_then_how_it_ended(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    t0 = time.time() + 2.0
    job = subprocess.Popen(
        [
            *DSLAUNCH,
            "--master-port",
            "0",
            "--nproc-per-node",
            "2",
            "--log-dir",
            str(logs),
            SCRIPT,
            f"{t0}",
            "0.05",
            "120",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        seen = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and job.poll() is None:
            done = _report(logs)
            if done.returncode == 0 and done.stdout.find("job running:") >= 0 and " step " in done.stdout:
                seen = next(x for x in done.stdout.splitlines() if x.startswith("job running:"))
                break
            time.sleep(0.2)
        assert seen, (done.returncode, done.stdout, done.stderr)
        assert "2 of 2 ranks alive" in seen and "0 restarts" in seen, seen
        _out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, err
    after = _report(logs)
    assert after.returncode == 0 and "job succeeded: attempt 1" in after.stdout, after.stdout
    assert "timeline:" in after.stdout


def test_no_status_file_reports_as_before(tmp_path: Path) -> None:
    from dslaunch.cli.report_option import live_line

    assert live_line(str(tmp_path)) == ""
