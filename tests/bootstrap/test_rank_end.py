"""A bootstrap rank ends with os._exit once what matters has run (issue 21, item 5; docs/teardown.md, "A rank's
end"): nothing the script left to the interpreter's exit is lost, the exit code is the script's, and a finished
torch job still exits 0.

Every test runs real processes. The scripts carry a sentinel whose ``__del__`` prints only if the interpreter
finalises, so each test also shows which way the rank ended; ``DSLAUNCH_RANK_FINALIZE=1`` is the control.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli

pytestmark = pytest.mark.launch

RANK_END = str(SCRIPTS / "rank_end.py")
ENDING = str(SCRIPTS / "ending.py")
FINALISED = "interpreter finalised"
FILES = {
    "kept.txt": "kept open, never flushed\n",
    "cycle.txt": "cyclic garbage collected\n",
    "logging.txt": "logged through logging\n",
    "atexit.txt": "atexit wrote\n",
    "thread.txt": "thread joined\n",
    "child.txt": "child joined\n",
    "native.txt": "written through C stdio\n",
}
LINES = ("printed without newline or flush", "user atexit handler ran", "weakref.finalize ran")


def _env(tmp_path: Path, mode: str, finalise: bool = False) -> dict[str, str]:
    env = {"OUT_DIR": str(tmp_path), "MODE": mode, "CUDA_VISIBLE_DEVICES": "", "DSLAUNCH_PG_TIMEOUT": "60"}
    return {**env, "DSLAUNCH_RANK_FINALIZE": "1"} if finalise else {**env, "DSLAUNCH_RANK_FINALIZE": ""}


def _check_nothing_lost(out_dir: Path, stdout: str) -> None:
    for name, text in FILES.items():
        assert (out_dir / name).read_text() == text, name
    assert gzip.decompress((out_dir / "packed.txt.gz").read_bytes()) == b"gzip needs its trailer\n" * 100
    assert "logged through structlog" in (out_dir / "structlog.txt").read_text()
    for line in LINES:
        assert line in stdout, stdout


@pytest.mark.parametrize("preload", [False, True], ids=["exec", "preload"])
@pytest.mark.parametrize("finalise", [False, True], ids=["os_exit", "finalised"])
def test_nothing_left_to_the_exit_is_lost(tmp_path: Path, preload: bool, finalise: bool) -> None:
    extra = ["--preload", "preopened,structlog,gzip"] if preload else []
    result = run_cli(
        ["--nproc-per-node", "1", *extra, RANK_END],
        env={**_env(tmp_path, "preopened", finalise)},
        cwd=str(SCRIPTS),  # the zygote finds preopened.py on its sys.path
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    assert "exec'd instead" not in result.stderr, result.stderr
    _check_nothing_lost(tmp_path, result.stdout)
    [preopened] = tmp_path.glob("preopened.*.txt")
    assert preopened.read_text() == "written by the rank into a file the preloaded module opened\n"
    assert (FINALISED in result.stdout) == finalise, result.stdout


# ---- exit codes, straight through the bootstrap (no agent between): the status and the error file -------------
def _bootstrap(tmp_path: Path, mode: str, finalise: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_env(tmp_path, mode, finalise), "DSLAUNCH_ERROR_FILE": str(tmp_path / "error.json")}
    argv = [sys.executable, "-u", "-m", "dslaunch.bootstrap", RANK_END]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, cwd=str(SCRIPTS))


@pytest.mark.parametrize(
    "mode, code, record",
    [
        ("exit0", 0, None),
        ("exit3", 3, "SystemExit"),
        ("message", 1, "SystemExit"),
        ("raise", 1, "RuntimeError"),
        ("interrupt", 130, "KeyboardInterrupt"),
    ],
)
def test_exit_code_and_error_file_are_the_scripts(tmp_path: Path, mode: str, code: int, record: str | None) -> None:
    result = _bootstrap(tmp_path, mode)
    assert result.returncode == code, result.stderr
    assert FINALISED not in result.stdout
    _check_nothing_lost(tmp_path, result.stdout)
    error_file = tmp_path / "error.json"
    if record is None:
        assert not error_file.exists()
        return
    data = json.loads(error_file.read_text())
    assert data["exception"] == record and data["code"] == code and data["pid"] > 0 and data["ts"] > 0
    if mode == "raise":
        assert "RuntimeError: the script fails" in data["traceback"] and "the script fails" in result.stderr
    if mode == "message":
        assert "a message to stderr" in result.stderr


def test_stdout_that_cannot_be_flushed_exits_120(tmp_path: Path) -> None:
    assert _bootstrap(tmp_path, "badstdout").returncode == 120


def test_a_signal_still_ends_the_rank_by_that_signal(tmp_path: Path) -> None:
    result = _bootstrap(tmp_path, "sigterm")
    assert result.returncode == -15, result.stderr  # SIGTERM's default action: no exit code, no atexit


def test_exit_statuses_match_plain_python(tmp_path: Path) -> None:
    """The same script under plain python (which finalises) ends with the same status as under the bootstrap."""
    for mode in ("exit0", "exit3", "message", "raise", "badstdout"):
        env = {**os.environ, **_env(tmp_path, mode)}
        plain = subprocess.run([sys.executable, RANK_END], capture_output=True, env=env, timeout=60, cwd=str(SCRIPTS))
        assert _bootstrap(tmp_path, mode).returncode == plain.returncode, mode


@pytest.mark.parametrize("mode, code", [("exit3", 3), ("raise", 1), ("sigterm", 143)])
def test_launcher_reports_the_scripts_code(tmp_path: Path, mode: str, code: int) -> None:
    result = run_cli(["--nproc-per-node", "1", RANK_END], env=_env(tmp_path, mode), cwd=str(SCRIPTS), timeout=90)
    assert result.returncode == code, result.stderr
    assert "rank 0 (local_rank 0, node 0)" in result.stderr
    if mode == "raise":
        assert "RuntimeError: the script fails" in result.stderr


# ---- torch: a finished gloo job exits 0 without finalising, however it ends -----------------------------------
SENTINEL = re.compile(r"gloo workers at finalisation: (\d+)")


@pytest.mark.torch
@pytest.mark.torch_api
@pytest.mark.parametrize(
    "mode, preload",
    [(mode, False) for mode in ("engine", "adopt", "user_destroys", "exit_in_loop", "async_left", "ddp", "global_ddp")]
    + [("engine", True), ("ddp", True)],  # forked ranks end by the same code: two modes cover them
)
def test_finished_torch_job_exits_0_without_finalising(tmp_path: Path, mode: str, preload: bool) -> None:
    extra = ["--preload", "torch"] if preload else []
    env = {**_env(tmp_path, mode), "OMP_NUM_THREADS": "1"}
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", *extra, ENDING], env=env, timeout=150)
    assert result.returncode == 0, result.stderr
    assert "exec'd instead" not in result.stderr, result.stderr
    for rank in range(2):
        assert f"[rank{rank}]: rank {rank}: finished" in result.stdout
        if mode != "exit_in_loop":
            assert (tmp_path / f"rank{rank}.txt").read_text() == "unclosed file flushed\n"
    assert SENTINEL.findall(result.stdout) == [], result.stdout  # no rank finalised: the os._exit path ended each
