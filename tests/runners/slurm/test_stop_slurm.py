"""A requested stop under real Slurm (docs/stopping.md), on the private cluster (n1, n2 on 127.0.0.1):

- ``--launcher slurm`` (allocation mode): SIGTERM to dslaunch, or --stop-on-signal USR1 with USR1 sent to the
  batch shell as ``sbatch --signal=B:USR1@T`` sends it, reaches the tasks as a quiet SIGCONT and each rank's main
  process as SIGTERM: ranks with DataLoader-like workers save;
- ``srun dslaunch`` (node mode): ``scancel --signal=TERM`` reaches every process of the step itself (workers too:
  proctrack signals them all, under any launcher), so these ranks have no workers: each saves, hearing SIGTERM once.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import SCRIPTS, wait_for_file, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

ROOT = Path(__file__).parents[3]
SAVER = str(SCRIPTS / "stop_saver.py")
DSLAUNCH = [sys.executable, "-m", "dslaunch"]
LIMIT = 90


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["timeout", "-k", "5", str(LIMIT), *argv],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ready(out: Path) -> None:
    for rank in range(4):
        assert wait_for_file(str(out / f"rank{rank}.ready"), 60), f"rank {rank} never started"
    time.sleep(0.3)


def _saved(out: Path) -> list[bool]:
    return [(out / f"rank{rank}.saved").exists() for rank in range(4)]


def _finish(proc: subprocess.Popen[str]) -> str:
    try:
        _out, err = proc.communicate(timeout=LIMIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


def _launcher(parent: int) -> psutil.Process:
    found = [
        p for p in psutil.Process(parent).children(recursive=True) if p.cmdline()[1:4] == ["-m", "dslaunch", "--run-id"]
    ]
    assert len(found) == 1, found
    return found[0]


def test_sigterm_to_launcher_slurm_every_rank_saves_and_the_job_exits_143(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    run_id = "slurmstop-" + uuid.uuid4().hex[:8]
    argv = [*DSLAUNCH, "--run-id", run_id, "--launcher", "slurm", "--nproc-per-node", "2", "--stop-grace", "4"]
    salloc = _start(["salloc", "-N2", *argv, SAVER, str(tmp_path)], slurm_env)
    _ready(tmp_path)
    _launcher(salloc.pid).terminate()
    err = _finish(salloc)
    assert _saved(tmp_path) == [True] * 4, err
    assert salloc.returncode == 143, err
    for rank in range(4):  # once: from the agent, never from Slurm
        assert (tmp_path / f"rank{rank}.stops").read_text().split() == ["SIGTERM"]
    assert err.count("2 of 2 ranks exited 0 within") == 2, err
    assert wait_until_gone(run_id, 15) == []


def test_stop_on_signal_usr1_to_the_batch_shell_every_rank_saves(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """``exec dslaunch --stop-on-signal USR1`` in a batch script; ``scancel --batch --signal=USR1`` delivers it as
    ``#SBATCH --signal=B:USR1@120`` would: to the batch shell (dslaunch) only. The job exits 128+10."""
    run_id = "slurmusr1-" + uuid.uuid4().hex[:8]
    script = tmp_path / "job.sbatch"
    argv = [
        *DSLAUNCH,
        "--run-id",
        run_id,
        "--launcher",
        "slurm",
        "--nproc-per-node",
        "2",
        "--stop-on-signal",
        "USR1",
        "--stop-grace",
        "4",
    ]
    script.write_text("#!/bin/sh\nexec " + " ".join([*argv, SAVER, str(tmp_path)]) + "\n")
    name = "dsl-" + uuid.uuid4().hex[:6]
    out = tmp_path / "job.out"
    sbatch = _start(["sbatch", "--wait", "-N2", f"--job-name={name}", f"--output={out}", str(script)], slurm_env)
    _ready(tmp_path)
    job = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, env=slurm_env, timeout=10
    ).stdout.strip()
    subprocess.run(["scancel", "--batch", "--signal=USR1", job], env=slurm_env, timeout=10, check=True)
    err = _finish(sbatch)
    text = out.read_text() if out.exists() else ""
    assert _saved(tmp_path) == [True] * 4, err + text
    assert "dslaunch: stopped by SIGUSR1 (exit 138)" in text, text
    assert text.count("2 of 2 ranks exited 0 within") == 2, text  # each node's task
    assert sbatch.returncode == 138, text  # sbatch --wait: the job's code
    assert wait_until_gone(run_id, 15) == []


def test_scancel_sigterm_in_node_mode_every_rank_saves_hearing_it_once(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    run_id = "slurmnode-" + uuid.uuid4().hex[:8]
    name = "dsl-" + uuid.uuid4().hex[:6]
    argv = [*DSLAUNCH, "--run-id", run_id, "--nproc-per-node", "2", "--stop-grace", "4", SAVER, str(tmp_path)]
    srun = _start(["srun", f"--job-name={name}", "-N2", "--ntasks-per-node=1", *argv], {**slurm_env, "WORKERS": "0"})
    _ready(tmp_path)
    job = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, env=slurm_env, timeout=10
    ).stdout.strip()
    subprocess.run(["scancel", "--signal=TERM", f"{job}.0"], env=slurm_env, timeout=10, check=True)
    err = _finish(srun)
    assert _saved(tmp_path) == [True] * 4, err
    assert srun.returncode == 143, err
    for rank in range(4):  # Slurm's own, not again from the agent
        assert (tmp_path / f"rank{rank}.stops").read_text().split() == ["SIGTERM"]
    assert err.count("stopped by SIGTERM (exit 143); 2 of 2 ranks exited 0 within") == 2, err
    assert wait_until_gone(run_id, 15) == []


def test_scancel_of_the_job_under_launcher_slurm_is_no_success(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """``scancel JOB`` sends SIGCONT then SIGTERM to every process of the step: the tasks must not take the SIGCONT
    for dslaunch's own quiet request and exit 0 (salloc's command would then exit 0)."""
    run_id = "slurmcancel-" + uuid.uuid4().hex[:8]
    name = "dsl-" + uuid.uuid4().hex[:6]
    argv = [*DSLAUNCH, "--run-id", run_id, "--launcher", "slurm", "--nproc-per-node", "2", "--stop-grace", "4"]
    salloc = _start(["salloc", f"--job-name={name}", "-N2", *argv, SAVER, str(tmp_path)], slurm_env)
    _ready(tmp_path)
    job = subprocess.run(
        ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, env=slurm_env, timeout=10
    ).stdout.strip()
    subprocess.run(["scancel", job], env=slurm_env, timeout=10, check=True)
    err = _finish(salloc)
    assert salloc.returncode != 0, err
    assert wait_until_gone(run_id, 15) == []
