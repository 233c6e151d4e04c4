"""One stop step per node under real Slurm: each srun task is its own launcher with no channel to the others, so
each node decides its stop step alone (docs/stopping.md). ``scancel --signal=TERM`` reaches every process of the
step at once: every rank (ignoring Slurm's own SIGTERM, as one that calls should_stop() must there) saves, and the
ranks of one node save one step. The nodes need not agree, so the ranks keep no barrier across nodes (NO_BARRIER):
with one, a node that stops a step before the other leaves that node's ranks waiting in the barrier until the grace
ends (seen under load, CI 2026-12-05), as ranks in a collective would be (docs/stopping.md, "Where the step is
exact")."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers import wait_until_gone
from tests.runners.slurm.test_cluster import DSLAUNCH, _start
from tests.runners.stop_steps import RANKS, saved, wait_ready

pytestmark = [pytest.mark.launch, pytest.mark.cluster]
_APART = {"NO_BARRIER": "1"}  # each rank at its own pace: the nodes do not agree on one step


def test_scancel_in_node_mode_stops_each_nodes_ranks_at_one_step(slurm_env: dict[str, str], tmp_path: Path) -> None:
    run_id, name = "slurmstop-" + uuid.uuid4().hex[:8], f"dsl-{uuid.uuid4().hex[:6]}"
    argv = ["srun", f"--job-name={name}", "-N2", "--ntasks-per-node=1",
            *DSLAUNCH, "--nproc-per-node", "2", "--run-id", run_id, RANKS]  # fmt: skip
    env = {**slurm_env, "OUT_DIR": str(tmp_path), "IGNORE_TERM": "1", "STEP_TIME": "0.05", **_APART}
    srun = _start(argv, env)
    try:
        wait_ready(tmp_path, range(4), srun)  # type: ignore[arg-type]
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
    got = {rank: int(step) for rank, step in saved(tmp_path, range(4)).items()}
    assert sorted(got) == [0, 1, 2, 3], (got, err)
    assert got[0] == got[1] and got[2] == got[3], got  # one step per node
    print(f"node 0 stopped at {got[0]}, node 1 at {got[2]}")
    assert wait_until_gone(run_id, 15) == []


def test_sigterm_to_launcher_slurm_stops_each_nodes_ranks_at_one_step(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """``--launcher slurm`` inside salloc: SIGTERM to dslaunch is ``scancel --signal=TERM`` on its step."""
    import psutil

    run_id = "slurmstop-" + uuid.uuid4().hex[:8]
    argv = ["salloc", "-N2", *DSLAUNCH, "--launcher", "slurm", "--nproc-per-node", "2", "--run-id", run_id, RANKS]
    salloc = _start(argv, {**slurm_env, "OUT_DIR": str(tmp_path), "IGNORE_TERM": "1", "STEP_TIME": "0.05", **_APART})
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
    got = {rank: int(step) for rank, step in saved(tmp_path, range(4)).items()}
    assert sorted(got) == [0, 1, 2, 3], (got, err)
    assert got[0] == got[1] and got[2] == got[3], got  # one step per node
    assert salloc.returncode == 143, err
    print(f"node 0 stopped at {got[0]}, node 1 at {got[2]}")
    assert wait_until_gone(run_id, 15) == []
