"""Spares in a real Slurm allocation (``salloc -p wide -N3 dslaunch --num-nodes 2``): a lost node is left out and
the next srun step runs on the survivor and the spare, with the same world size (docs/elastic.md)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import SCRIPTS, job_processes, wait_for_file, wait_until_gone
from tests.runners.slurm.test_cluster import DSLAUNCH, _run, _start

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

JOB = str(SCRIPTS / "elastic_slurm.py")


def _records(stdout: str) -> list[dict]:  # type: ignore[type-arg]
    found = [json.loads(line.partition("]: ")[2]) for line in stdout.splitlines() if "]: {" in line]
    return sorted(found, key=lambda r: r["rank"])


def _rank0(run_id: str) -> psutil.Process:
    return next(p for p in job_processes(run_id) if p.environ().get("RANK") == "0")


def test_a_spare_node_replaces_one_whose_agent_was_killed(slurm_env: dict[str, str], tmp_path: Path) -> None:
    run_id = "slurmspare-" + uuid.uuid4().hex[:8]
    argv = ["salloc", "-p", "wide", "-N3", *DSLAUNCH, "--launcher", "slurm", "--num-nodes", "2",
            "--nproc-per-node", "2", "--max-restarts", "1", "--restart-delay", "0", "--run-id", run_id,
            JOB, "sleep-first", str(tmp_path)]  # fmt: skip
    proc = _start(argv, slurm_env)
    try:
        assert all(wait_for_file(str(tmp_path / f"ready.{r}"), 60) for r in range(4)), "attempt 0 did not start"
        agent = _rank0(run_id).parent()
        assert agent is not None and "dslaunch" in " ".join(agent.cmdline()), agent
        assert agent.environ().get("SLURMD_NODENAME") == "n1"
        agent.kill()  # n1's node agent: n1 is also the rendezvous host of attempt 0
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out + err
    assert "left out: n1 (its node agent was lost)" in err, err
    assert "attempt 2 runs on n2, n3 (4 ranks)" in err, err
    assert "attempt 1 on n1, n2: exit 254" in err and "attempt 2 on n2, n3: exit 0: succeeded" in err, err
    seen = _records(out)
    assert [(r["rank"], r["world"], r["attempt"]) for r in seen] == [(r, 4, 1) for r in range(4)], out
    assert [r["host"] for r in seen] == ["n2", "n2", "n3", "n3"]
    assert {r["master"] for r in seen} == {"127.0.0.1"}  # n2's NodeAddr: the first node of attempt 2
    assert wait_until_gone(run_id, 10) == []


def test_a_node_range_uses_the_whole_allocation(slurm_env: dict[str, str]) -> None:
    run_id = "slurmrange-" + uuid.uuid4().hex[:8]
    res = _run(
        ["salloc", "-p", "wide", "-N3", *DSLAUNCH, "--launcher", "slurm", "--nnodes", "2:3", "--nproc-per-node", "1",
         "--run-id", run_id, JOB, "echo"],
        slurm_env,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    seen = [(r["rank"], r["world"], r["host"]) for r in _records(res.stdout)]
    assert seen == [(0, 3, "n1"), (1, 3, "n2"), (2, 3, "n3")], res.stdout
    assert "left out" not in res.stderr
    assert wait_until_gone(run_id, 10) == []


def test_a_failing_rank_blames_no_node(slurm_env: dict[str, str]) -> None:
    run_id = "slurmblame-" + uuid.uuid4().hex[:8]
    res = _run(
        ["salloc", "-p", "wide", "-N3", *DSLAUNCH, "--launcher", "slurm", "--num-nodes", "2", "--nproc-per-node", "1",
         "--max-restarts", "1", "--restart-delay", "0", "--run-id", run_id, JOB, "fail-first"],
        slurm_env,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "left out" not in res.stderr and "attempt 2 on n1, n2: exit 0: succeeded" in res.stderr, res.stderr
    assert [(r["rank"], r["host"]) for r in _records(res.stdout)] == [(0, "n1"), (1, "n2")]
    assert wait_until_gone(run_id, 10) == []
