"""Logs are private whatever the umask (issue 22, item 6): under umask 000, every folder dslaunch makes for
``--log-dir`` is at most 0700 and every file at most 0600 (they hold exported names, tracebacks, paths).

The files are made in two places: the loggers and the report (``dslaunch/logs``, ``dslaunch/report``), and the
node agent and the rank bootstrap (each rank's ``rank<N>.stdout.log``/``.stderr.log`` and its error file). Each
place has a test of its own here, so a failure names the place that still follows the umask.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from dslaunch.oslib.owner_only import private_dir, private_open
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
    job = _unmasked(["--nproc-per-node", "2", "--master-port", "0", "--log-dir", str(logs), str(SCRIPT)], FAIL_RANK="1")
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


def test_the_helpers_follow_no_umask_but_a_stricter_one(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        private_dir(str(tmp_path / "a" / "b"))
        with private_open(str(tmp_path / "a" / "b" / "f.log"), "a", encoding="utf-8") as f:
            f.write("x\n")
            assert f.name == str(tmp_path / "a" / "b" / "f.log")
        os.umask(0o077 | 0o100)
        with private_open(str(tmp_path / "a" / "g.bin"), "wb"):
            pass
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "a").rglob("*")}
    assert modes == {"b": 0o700, "f.log": 0o600, "g.bin": 0o600}
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o700


def test_existing_folders_and_files_are_left_as_they_are(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir(mode=0o755)
    (tmp_path / "shared" / "old.log").write_text("a\n")
    os.chmod(tmp_path / "shared" / "old.log", 0o644)
    private_dir(str(tmp_path / "shared"))
    with private_open(str(tmp_path / "shared" / "old.log"), "a", encoding="utf-8") as f:
        f.write("b\n")
    assert stat.S_IMODE((tmp_path / "shared").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "shared" / "old.log").stat().st_mode) == 0o644
    assert (tmp_path / "shared" / "old.log").read_text() == "a\nb\n"
    with pytest.raises(FileExistsError):
        private_dir(str(tmp_path / "shared" / "old.log" / "x"))
