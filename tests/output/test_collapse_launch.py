"""The console collapse with real launches on this machine: 256 trivial ranks (a shell script each).

One warning from each of 256 ranks is at most 2 console lines (the first at once, the rest as one ranged line);
256 different lines stay 256; --no-collapse-output gives 256 identical lines; --log-dir's files keep every line;
a failing rank's line shows before the other ranks' teardown and the summary.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH
from tests.output.collapse_check import SAME, SCRIPT, check_failure_order, every_rank_once, gated_run, lines_of, own

pytestmark = pytest.mark.launch

RANKS = 256


def _clean() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("DSLAUNCH_")}


def launch(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DSLAUNCH, "--nproc-per-node", str(RANKS), *args, "--no-python", "sh", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={**_clean(), **(env or {})},
    )


def test_one_warning_from_256_ranks_is_at_most_two_lines_and_the_files_keep_all(tmp_path: Path) -> None:
    result = launch("--log-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = lines_of(result.stderr, SAME)
    assert len(lines) <= 2 and every_rank_once(lines, RANKS), result.stderr[-2000:]
    assert len(lines[0]) == 1  # the first copy printed as it came, with its own prefix
    for rank in range(RANKS):
        assert (tmp_path / f"rank{rank}.stderr.log").read_text() == SAME + "\n"


def test_256_different_lines_stay_256() -> None:
    result = launch(env={"LINE": "own"})
    assert result.returncode == 0, result.stderr[-2000:]
    for rank in range(RANKS):
        assert lines_of(result.stderr, own(rank)) == [[rank]]


@pytest.mark.parametrize("off", [["--no-collapse-output"], ["env"]], ids=["option", "env"])
def test_the_off_switch_prints_every_copy(off: list[str]) -> None:
    args, env = (off, None) if off != ["env"] else ([], {"DSLAUNCH_COLLAPSE_OUTPUT": "0"})
    result = launch(*args, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(lines_of(result.stderr, SAME)) == [[rank] for rank in range(RANKS)]


def test_a_failing_ranks_line_shows_before_the_teardown_and_the_summary(tmp_path: Path) -> None:
    """Rank 5 prints just after the others (its copy is held in their window) and exits 3 once they all have:
    its copy is out before the ranks stopped for it say so, and before the summary."""
    args = ["--nproc-per-node", str(RANKS), "--shutdown-timeout", "10", "--export", "FAIL_RANK=5"]
    result = gated_run(args, tmp_path, RANKS, _clean())
    assert result.returncode == 3, result.stderr[-3000:]
    assert every_rank_once(lines_of(result.stderr, SAME), RANKS), result.stderr[-3000:]
    check_failure_order(result.stderr, 5, range(RANKS))
