"""Logs are private whatever the umask (issue 22, item 6): under umask 000, every folder dslaunch makes for
``--log-dir`` is at most 0700 and every file at most 0600 (they hold exported names, tracebacks, paths).

The files are made in two places: the loggers and the report (``dslaunch/logs``, ``dslaunch/report``), and the
node agent and the rank bootstrap (each rank's ``rank<N>.stdout.log``/``.stderr.log`` and its error file). Each
place has a test of its own here, so a failure names the place that still follows the umask. The helpers
themselves are tested in tests/oslib/test_owner_only.py.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH, SCRIPTS

SCRIPT = SCRIPTS / "private_ranks.py"
AGENT_AND_RANK_FILES = re.compile(r"rank\d+\.(stdout\.log|stderr\.log|error\.json)")


def _unmasked(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DSLAUNCH, *args], capture_output=True, text=True, timeout=90, env={**os.environ, **env}, umask=0
    )


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A failing 2-rank job and its report, under umask 000, into a --log-dir two folders below an existing one."""
    top = tmp_path_factory.mktemp("private") / "new"
    logs = top / "logs"
    gate = tmp_path_factory.mktemp("gate")
    args = ["--nproc-per-node", "2", "--master-port", "0", "--log-dir", str(logs), str(SCRIPT)]
    job = _unmasked(args, FAIL_RANK="1", GATE_DIR=str(gate))
    assert job.returncode == 1 and "rank failed on purpose" in job.stderr, job.stderr
    report = _unmasked(["--report", str(logs)])
    assert report.returncode == 0, report.stderr
    return top


def _too_open(top: Path, agent_and_rank: bool) -> dict[str, str]:
    """Paths under ``top`` that group or others may read, write or enter, with their modes."""
    found = {}
    for root, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = Path(root, name)
            if name in files and bool(AGENT_AND_RANK_FILES.fullmatch(name)) != agent_and_rank:
                continue
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077:
                found[str(path.relative_to(top))] = oct(mode)
    return found


@pytest.mark.launch
def test_the_loggers_and_the_report_make_private_folders_and_files(made: Path) -> None:
    names = {p.name for p in made.rglob("*")}
    assert {"logs", "launcher.jsonl", "agent0.jsonl", "rank0.jsonl", "rank1.jsonl", "timeline.html"} <= names
    assert stat.S_IMODE(made.stat().st_mode) == 0o700  # the parent --log-dir needed, made by dslaunch too
    assert _too_open(made, agent_and_rank=False) == {}


@pytest.mark.launch
def test_the_ranks_output_and_error_files_are_private(made: Path) -> None:
    names = {p.name for p in made.rglob("*")}
    assert {"rank0.stdout.log", "rank1.stderr.log", "rank1.error.json"} <= names
    assert _too_open(made, agent_and_rank=True) == {}
