"""A finished torch job exits 0 however its script ends; a failing one keeps its code (issue 10).

The abort this guards against is a race (docs/teardown.md), so one run passing proves little;
what each run does prove is the invariant behind the fix: when interpreter finalisation
starts, no gloo worker thread is alive. The script's sentinel prints that count from
finalisation; a rank whose groups outlive it (a module-level DDP model) skips finalisation
instead, so prints nothing, and must still flush its files and exit 0.
bench/stress_teardown.py is the repeated-run check.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from dslaunch.bootstrap.teardown import exit_status
from tests.helpers import SCRIPTS, run_cli

pytestmark = pytest.mark.launch

SCRIPT = str(SCRIPTS / "ending.py")
# The ranks finalise (the sentinel reports from there); test_rank_end.py checks the default end, os._exit.
FAST = {"DSLAUNCH_PG_TIMEOUT": "60", "CUDA_VISIBLE_DEVICES": "", "DSLAUNCH_RANK_FINALIZE": "1"}
SENTINEL = re.compile(r"gloo workers at finalisation: (\d+)")


def _launch(tmp_path: Path, mode: str, nproc: int = 2, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**FAST, "MODE": mode, "OUT_DIR": str(tmp_path)}
    return run_cli(["--nproc-per-node", str(nproc), "--master-port", "0", *extra, SCRIPT], env=env, timeout=150)


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (3, 3), (256, 0), (-1, 255), (True, 1), ("bye", 1)])
def test_exit_status_matches_python(code: object, status: int) -> None:
    assert exit_status(code) == status
    out = subprocess.run([sys.executable, "-c", f"raise SystemExit({code!r})"], capture_output=True)
    assert out.returncode == status


# Not torch_api: these run the opt-out path (DSLAUNCH_RANK_FINALIZE=1); test_rank_end.py runs the same scripts on
# the default path, on the newest torch too.
@pytest.mark.torch
@pytest.mark.parametrize(
    "mode, finalises",
    [
        ("engine", True),  # engine made the group; script never destroys it
        ("adopt", True),  # script made the group, engine adopted it
        ("user_destroys", True),  # script calls destroy_process_group() itself
        ("user_destroys_adopted", True),
        ("exit_in_loop", True),  # sys.exit(0) in the middle of a collective loop
        ("async_left", True),  # async all_reduces never waited on
        ("ddp", None),  # DDP model deleted (torch may still hold its group)
        ("global_ddp", False),  # module-level DDP keeps the group: finalisation is skipped
    ],
)
def test_finished_job_ends_clean(tmp_path: Path, mode: str, finalises: bool | None) -> None:
    result = _launch(tmp_path, mode)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        assert f"[rank{rank}]: rank {rank}: finished" in result.stdout
    counts = [int(n) for n in SENTINEL.findall(result.stdout)]
    assert all(n == 0 for n in counts), result.stdout  # never finalises with a gloo worker alive
    if finalises is not None:
        assert counts == ([0, 0] if finalises else []), result.stdout
    if mode != "exit_in_loop":  # files written and never closed still reach the disk
        for rank in range(2):
            assert (tmp_path / f"rank{rank}.txt").read_text() == "unclosed file flushed\n"


@pytest.mark.torch_api
@pytest.mark.torch
def test_world_of_one_under_dslaunch(tmp_path: Path) -> None:
    result = _launch(tmp_path, "engine", 1)
    assert result.returncode == 0, result.stderr
    assert "rank 0: finished" in result.stdout
    assert SENTINEL.findall(result.stdout) == ["0"]


@pytest.mark.torch_api
@pytest.mark.torch
@pytest.mark.parametrize(
    "mode, code, cause",
    [
        ("raise", 1, "RuntimeError: rank 1 fails after its collectives"),
        ("exit3", 3, "exited with code 3"),
        ("abort", 134, "killed by SIGABRT"),
    ],
)
def test_failure_before_the_end_still_fails(tmp_path: Path, mode: str, code: int, cause: str) -> None:
    result = _launch(tmp_path, mode)
    assert result.returncode == code, result.stderr
    assert "rank 1 (local_rank 1, node 0)" in result.stderr and cause in result.stderr, result.stderr
