"""dslaunch.engine() on a real GPU: nccl for cuda tensors (gloo for CPU ones), device_id binding, the mesh on cuda,
a clean exit every time, and the demo (docs/gpu.md)."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.gpu.launch import FACTS, ROOT, Cuda, facts, job_env, launch

pytestmark = [pytest.mark.gpu, pytest.mark.torch, pytest.mark.launch]
NCCL_BACKEND = "cuda:nccl,cpu:gloo"  # what the engine asks init_process_group for on a GPU


def _one_nccl_rank(entry: dict[str, Any]) -> None:
    assert entry["backend"] == NCCL_BACKEND, entry
    assert entry["cuda_backend"] == "ProcessGroupNCCL", entry
    assert entry["device"] == "cuda:0" and entry["current"] == 0, entry
    assert entry["sum"] == [1.0] * 4 and entry["sum_device"] == "cuda:0", entry  # the collective ran on the GPU
    assert entry["cpu_sum"] == [1.0] * 2, entry
    assert entry["gpu_sum"] == 499500.0, entry


@pytest.mark.timeout(120)
def test_one_rank_nccl_job_through_the_engine(cuda: Cuda) -> None:
    result = launch(["--nproc-per-node", "1", "--master-port", "0", FACTS])
    assert result.returncode == 0, result.stderr
    entry = facts(result.stdout)[0]
    _one_nccl_rank(entry)
    assert entry["world"] == 1 and entry["cvd"] == "0", entry
    assert entry["bound"] == "cuda:0", entry  # device_id reached init_process_group: the group is bound to it
    assert entry["mesh_device"] == "cuda", entry
    assert entry["uuid"] == cuda.uuids[0], entry


@pytest.mark.timeout(120)
def test_plain_python_on_a_gpu_is_a_world_of_one() -> None:
    """No launcher: the engine's own world of one (a HashStore, no rendezvous) on nccl."""
    out = subprocess.run(
        [sys.executable, FACTS], capture_output=True, text=True, timeout=100, env=job_env(), cwd=str(ROOT)
    )
    assert out.returncode == 0, out.stderr
    entry = facts(out.stdout)[0]
    _one_nccl_rank(entry)
    assert entry["world"] == 1 and entry["cvd"] is None, entry
    print(f"bound device without a launcher: {entry['bound']}")


RUNS, AT_ONCE = 20, 4


@pytest.mark.timeout(300)
def test_a_finished_nccl_job_exits_0_every_time() -> None:
    """docs/teardown.md on NCCL: 20 of 20 finished one-rank jobs (nccl and gloo collectives) exit 0, none aborts."""

    def one(_: int) -> subprocess.CompletedProcess[str]:
        return launch(["--nproc-per-node", "1", "--master-port", "0", FACTS], env={"ITERS": "5"}, timeout=120)

    with ThreadPoolExecutor(AT_ONCE) as pool:
        results = list(pool.map(one, range(RUNS)))
    codes = [r.returncode for r in results]
    bad = [r for r in results if r.returncode != 0 or "terminate called" in r.stderr]
    assert not bad, f"exit codes {codes}; first bad run's stderr:\n{bad[0].stderr if bad else ''}"
    for result in results:
        entry = facts(result.stdout)[0]
        assert entry["sum"] == [1.0] * 4 and entry["cuda_backend"] == "ProcessGroupNCCL", entry


@pytest.mark.timeout(180)
def test_the_demo_on_cuda() -> None:
    result = launch(
        ["--nproc-per-node", "1", "--master-port", "0", "--mesh", "dp=1", "examples/train.py", "--steps", "8"],
        timeout=170,
    )
    assert result.returncode == 0, result.stderr
    done = [line for line in result.stdout.splitlines() if "]: done: " in line]
    assert len(done) == 1, result.stdout
    assert f"done: 1 ranks, backend {NCCL_BACKEND}, device cuda:0, " in done[0], done
    assert result.stdout.count("(ok) | loss") == 8, result.stdout
