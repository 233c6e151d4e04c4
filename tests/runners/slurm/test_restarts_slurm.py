"""--max-restarts under real Slurm: the srun step is run again (allocation mode), or every task of
``srun dslaunch`` restarts its node together with the others (node mode)."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import wait_until_gone
from tests.runners.slurm.test_cluster import ROOT, _run

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

FLAKY = str(ROOT / "tests" / "scripts" / "flaky.py")
DSLAUNCH = [sys.executable, "-m", "dslaunch"]


def _seen(folder: Path) -> list[tuple[int, ...]]:
    return [tuple(int(x) for x in line.split()) for line in (folder / "attempts.txt").read_text().splitlines()]


@pytest.mark.parametrize("mode", ["allocation", "node"])
def test_fails_on_attempt_0_and_succeeds_on_attempt_1(slurm_env: dict[str, str], tmp_path: Path, mode: str) -> None:
    run_id = "slurmrs-" + uuid.uuid4().hex[:8]
    args = ["--nproc-per-node", "2", "--run-id", run_id, "--max-restarts", "1", "--restart-delay", "0.5"]
    # In attempt 0 the other ranks wait until the failure stops them: with 1 s, node 0's ranks once finished
    # before node 1's failure reached them (scancel --signal under load), so node 0 ended 0 and never restarted.
    script = [FLAKY, str(tmp_path), "3", "1", "7", "1", "60"]
    if mode == "allocation":
        argv = ["salloc", "-N2", *DSLAUNCH, "--launcher", "slurm", *args, *script]
    else:
        argv = ["srun", "-N2", "--ntasks-per-node=1", *DSLAUNCH, "--master-port", "0", *args, *script]
    res = _run(argv, slurm_env)
    assert res.returncode == 0, res.stdout + res.stderr
    seen = _seen(tmp_path)
    assert sorted(r for a, r, _m in seen if a == 1) == [0, 1, 2, 3], seen
    assert {a for a, _r, _m in seen} == {0, 1}
    assert "rank 3 (local_rank 1, node 1) on host n2 exited with code 7" in res.stderr
    assert wait_until_gone(run_id, 10) == []


def test_a_task_started_after_its_peer_failed_still_restarts_with_it(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """srun starts a step's tasks one node after another: node 0's starts 3 s late, after node 1's rank failed
    and its task told the step. Node 0 hears the tell repeated (before or just after it starts its ranks) and
    joins attempt 1; before, it never heard, ran its attempt 0 to the end and exited 0 while node 1 restarted."""
    run_id = "slurmrs-" + uuid.uuid4().hex[:8]
    late = 'if [ "$SLURM_NODEID" = 0 ]; then sleep 3; fi; exec "$@"'
    argv = ["srun", "-N2", "--ntasks-per-node=1", "sh", "-c", late, "sh", *DSLAUNCH, "--master-port", "0",
            "--nproc-per-node", "2", "--run-id", run_id, "--max-restarts", "1", "--restart-delay", "0",
            FLAKY, str(tmp_path), "3", "1", "7", "1", "60"]  # fmt: skip
    res = _run(argv, slurm_env)
    assert res.returncode == 0, res.stdout + res.stderr
    seen = _seen(tmp_path)
    assert sorted(r for a, r, _m in seen if a == 1) == [0, 1, 2, 3], seen
    assert "node 0 (n1) stopped: another node of the Slurm step failed" in res.stderr, res.stderr
    assert wait_until_gone(run_id, 10) == []


def test_always_failing_step_exits_with_its_code_after_n_plus_one(slurm_env: dict[str, str], tmp_path: Path) -> None:
    run_id = "slurmrs-" + uuid.uuid4().hex[:8]
    res = _run(
        ["srun", "-N2", "--ntasks-per-node=1", *DSLAUNCH, "--nproc-per-node", "1", "--master-port", "0",
         "--run-id", run_id, "--max-restarts", "2", "--restart-delay", "0", FLAKY, str(tmp_path), "1", "99", "6", "30"],
        slurm_env,
    )  # fmt: skip
    assert res.returncode == 6, res.stdout + res.stderr
    assert sorted({a for a, _r, _m in _seen(tmp_path)}) == [0, 1, 2]
    assert wait_until_gone(run_id, 10) == []


def test_rank_mode_refuses_restarts(slurm_env: dict[str, str], tmp_path: Path) -> None:
    res = _run(["srun", "-N1", "-n2", *DSLAUNCH, "--max-restarts", "1", FLAKY, str(tmp_path), "0", "0", "0"], slurm_env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "rank mode" in res.stderr and "--max-restarts" in res.stderr and "Traceback" not in res.stderr


def test_node_mode_restarts_fork_from_each_nodes_kept_zygote(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """``srun dslaunch --preload --max-restarts``: each task keeps its node's zygote from attempt to attempt, as the
    local launcher does (issue 31: warm restarts wherever the agent stays)."""
    run_id = "slurmwarm-" + uuid.uuid4().hex[:8]
    warm = ROOT / "tests" / "scripts" / "warm"
    argv = ["srun", "-N2", "--ntasks-per-node=1", *DSLAUNCH, "--master-port", "0", "--nproc-per-node", "2",
            "--run-id", run_id, "--preload", "json", "--max-restarts", "1", "--restart-delay", "0",
            str(warm / "warm_job.py")]  # fmt: skip
    res = _run(argv, slurm_env, {"PYTHONPATH": str(warm), "SLEEP": "30"})
    assert res.returncode == 0, res.stdout + res.stderr
    seen = {(int(m[1]), int(m[2])): m[3] for m in re.finditer(r"attempt=(\d) rank=(\d) zygote=(\S+)", res.stdout)}
    assert sorted(seen) == [(a, r) for a in (0, 1) for r in range(4)], res.stdout
    for node in (0, 1):  # one zygote per node served both attempts
        zygotes = {seen[(a, r)] for a in (0, 1) for r in (2 * node, 2 * node + 1)}
        assert len(zygotes) == 1 and "-" not in zygotes, seen
    assert wait_until_gone(run_id, 10) == []
