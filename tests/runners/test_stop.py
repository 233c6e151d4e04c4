"""A requested stop on the local runner, with real processes (docs/stopping.md): SIGTERM/SIGINT to dslaunch reach
each rank's main process only, so a rank with DataLoader-like workers and its own SIGTERM handler finishes its step
and saves; the groups go after --stop-grace (at once on a second signal); the job exits 128+N, never restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import DSLAUNCH, SCRIPTS, alive, wait_for_file, wait_until_gone

pytestmark = pytest.mark.launch
RANKS = 4


def _start(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    rid = "t" + uuid.uuid4().hex[:10]
    proc = subprocess.Popen(
        [
            *DSLAUNCH,
            "--nproc-per-node",
            str(RANKS),
            "--run-id",
            rid,
            *extra,
            str(SCRIPTS / "stop_saver.py"),
            str(tmp_path),
        ],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for rank in range(RANKS):
        assert wait_for_file(str(tmp_path / f"rank{rank}.ready"), 30), "ranks did not start"
    time.sleep(0.1)
    return proc, rid


def _pids(tmp_path: Path) -> list[int]:
    return [int(p) for rank in range(RANKS) for p in (tmp_path / f"rank{rank}.ready").read_text().split()]


def _saved(tmp_path: Path) -> int:
    return sum((tmp_path / f"rank{rank}.saved").exists() for rank in range(RANKS))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_every_rank_saves_when_dslaunch_is_stopped_and_the_job_exits_128_plus_n(
    tmp_path: Path, sig: int, code: int
) -> None:
    for run in range(3):
        out = tmp_path / str(run)
        out.mkdir()
        proc, rid = _start(out, "--stop-grace", "10", "--max-restarts", "2")
        pids = _pids(out)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert _saved(out) == RANKS, err
        assert proc.returncode == code, err
        name = signal.Signals(sig).name
        assert f"dslaunch: stopped by {name} (exit {code}); {RANKS} of {RANKS} ranks exited 0 within" in err
        assert "restarting" not in err  # --max-restarts never restarts a requested stop
        assert not wait_until_gone(rid, 5)
        assert not [p for p in pids if alive(p)]


def test_stop_exit_code_and_the_ranks_read_the_grace(tmp_path: Path) -> None:
    proc, _rid = _start(tmp_path, "--stop-grace", "7.5", "--stop-exit-code", "99")
    grace = {psutil.Process(pid).environ().get("DSLAUNCH_STOP_GRACE") for pid in _pids(tmp_path)[::3]}
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 99 and _saved(tmp_path) == RANKS, err
    assert grace == {"7.5"}


def test_a_rank_that_ignores_the_stop_gets_sigterm_at_the_graces_end_and_sigkill_after(tmp_path: Path) -> None:
    proc, rid = _start(tmp_path, "--stop-grace", "1", "--shutdown-timeout", "1", env={"IGNORE_STOP": "1"})
    pids = _pids(tmp_path)
    workers = [pid for rank in range(RANKS) for pid in pids[rank * 3 + 1 : rank * 3 + 3]]
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.6)
    assert all(alive(pid) for pid in workers), "a worker was signalled before the grace's end"
    _, err = proc.communicate(timeout=30)
    took = time.monotonic() - started
    assert proc.returncode == 143, err
    assert 1.9 < took < 8, took  # the grace (1 s), then SIGKILL after --shutdown-timeout (1 s)
    assert "0 of 4 ranks exited 0" in err and "was killed by SIGKILL" in err, err
    assert not wait_until_gone(rid, 5)
    assert not [p for p in pids if alive(p)]


def test_a_second_sigterm_ends_the_grace_at_once(tmp_path: Path) -> None:
    proc, rid = _start(tmp_path, "--stop-grace", "60", "--shutdown-timeout", "0.5", env={"IGNORE_STOP": "1"})
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert time.monotonic() - started < 6
    assert not wait_until_gone(rid, 5)


@pytest.mark.torch
def test_ranks_with_a_real_dataloader_save_on_sigterm(tmp_path: Path) -> None:
    """The issue's case: ``DataLoader(num_workers=2)`` and a handler that saves (``--preload torch``: one import)."""
    rid = "t" + uuid.uuid4().hex[:10]
    argv = [*DSLAUNCH, "--nproc-per-node", "2", "--run-id", rid, "--preload", "torch", "--stop-grace", "20"]
    proc = subprocess.Popen(
        [*argv, str(SCRIPTS / "stop_dataloader.py"), str(tmp_path)], stderr=subprocess.PIPE, text=True
    )
    for rank in range(2):
        assert wait_for_file(str(tmp_path / f"rank{rank}.ready"), 90), "ranks did not start"
    pids = [int(p) for rank in range(2) for p in (tmp_path / f"rank{rank}.ready").read_text().split()]
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert [(tmp_path / f"rank{rank}.saved").exists() for rank in range(2)] == [True, True], err
    assert proc.returncode == 143, err
    assert "2 of 2 ranks exited 0" in err, err
    assert not wait_until_gone(rid, 5)
    assert not [p for p in pids if alive(p)]
