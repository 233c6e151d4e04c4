"""One stop step for the whole job under real Slurm: each srun task is its own launcher, and node 0's task agrees
the step with the others over the step's stop channel (runners/slurm/stop_channel.py, docs/stopping.md).
``scancel --signal=TERM`` reaches every process of the step at once: every rank (ignoring Slurm's own SIGTERM, as
one that calls should_stop() must there) saves, all 4 at one step. The ranks of both nodes keep a barrier every
step (tests/scripts/stop_step_ranks.py), as ranks in a collective do: nodes that stopped one step apart would leave
one node's ranks in it until the grace ended, killed without a save (what the channel ends: 1 run in ~30 under load
before it)."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import wait_until_gone
from tests.runners.slurm.test_cluster import DSLAUNCH, _start
from tests.runners.stop_steps import RANKS, saved, wait_ready

pytestmark = [pytest.mark.launch, pytest.mark.cluster]
SECRET = {"DSLAUNCH_JOB_SECRET": "c2x1cm0tc3RvcC10ZXN0"}  # node mode: the batch script's export (docs/slurm.md)


def _one_step(tmp_path: Path, err: str) -> int:
    got = {rank: int(step) for rank, step in saved(tmp_path, range(4)).items()}
    assert sorted(got) == [0, 1, 2, 3], (got, err)
    assert len(set(got.values())) == 1, (got, err)  # one step on both nodes
    return got[0]


def _scancel_node_mode(slurm_env: dict[str, str], tmp_path: Path, run_id: str, extra: dict[str, str]) -> str:
    """``srun dslaunch`` on 2 nodes x 2 ranks; once every rank is ready (and ``SETTLE_S`` later),
    ``scancel --signal=TERM`` on the step; srun's stderr."""
    name = f"dsl-{uuid.uuid4().hex[:6]}"
    argv = ["srun", f"--job-name={name}", "-N2", "--ntasks-per-node=1",
            *DSLAUNCH, "--nproc-per-node", "2", "--run-id", run_id, RANKS]  # fmt: skip
    env = {**slurm_env, "OUT_DIR": str(tmp_path), "IGNORE_TERM": "1", "STEP_TIME": "0.05", **SECRET, **extra}
    srun = _start(argv, env)
    try:
        wait_ready(tmp_path, range(4), srun)  # type: ignore[arg-type]
        time.sleep(float(extra.get("SETTLE_S", "0")))
        job = subprocess.run(
            ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, env=slurm_env, timeout=10
        ).stdout.strip()
        assert job.isdigit()
        subprocess.run(["scancel", "--signal=TERM", f"{job}.0"], env=slurm_env, timeout=10, check=True)
        _out, err = srun.communicate(timeout=60)
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.wait()
    return err


def test_scancel_in_node_mode_stops_every_rank_at_one_step(slurm_env: dict[str, str], tmp_path: Path) -> None:
    run_id = "slurmstop-" + uuid.uuid4().hex[:8]
    err = _scancel_node_mode(slurm_env, tmp_path, run_id, {})
    print(f"every rank stopped at {_one_step(tmp_path, err)}")
    assert "not authenticated" not in err and "decides" not in err, err
    assert wait_until_gone(run_id, 15) == []


def test_a_node_far_behind_runs_on_to_the_step_of_the_node_ahead(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """No barrier: node 0's ranks run a step in 0.12 s, node 1's in 0.02 s. Each node alone would stop dozens of
    steps apart; node 0's task answers both with the largest proposal, node 1's, and node 0's ranks run on to it."""
    run_id = "slurmstop-" + uuid.uuid4().hex[:8]
    apart = {"NO_BARRIER": "1", "DELAY_RANKS": "0,1", "RANK_DELAY": "0.1", "STEP_TIME": "0.02", "READY_AFTER": "5"}
    err = _scancel_node_mode(slurm_env, tmp_path, run_id, {**apart, "SETTLE_S": "0.5"})  # node 1's ranks get ahead
    step = _one_step(tmp_path, err)
    assert step > 30, step  # node 1's: node 0's ranks had made about 10 calls
    assert wait_until_gone(run_id, 15) == []


def test_sigterm_to_launcher_slurm_stops_every_rank_at_one_step(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """``--launcher slurm`` inside salloc: SIGTERM to dslaunch is ``scancel --signal=CONT`` on its step; the step's
    secret is dslaunch's own (none given)."""
    import psutil

    run_id = "slurmstop-" + uuid.uuid4().hex[:8]
    argv = ["salloc", "-N2", *DSLAUNCH, "--launcher", "slurm", "--nproc-per-node", "2", "--run-id", run_id, RANKS]
    salloc = _start(argv, {**slurm_env, "OUT_DIR": str(tmp_path), "IGNORE_TERM": "1", "STEP_TIME": "0.05"})
    try:
        wait_ready(tmp_path, range(4), salloc)  # type: ignore[arg-type]
        launcher = [
            p
            for p in psutil.Process(salloc.pid).children(recursive=True)
            if p.cmdline()[1:5] == ["-m", "dslaunch", "--launcher", "slurm"]
        ]
        assert len(launcher) == 1
        launcher[0].terminate()
        _out, err = salloc.communicate(timeout=60)
    finally:
        if salloc.poll() is None:
            salloc.kill()
            salloc.wait()
    step = _one_step(tmp_path, err)
    assert salloc.returncode == 143, err
    assert "not authenticated" not in err and "decides" not in err, err
    print(f"every rank stopped at {step}")
    assert wait_until_gone(run_id, 15) == []
