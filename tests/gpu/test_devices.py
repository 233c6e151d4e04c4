"""Which GPU each rank gets: CUDA_VISIBLE_DEVICES from the node's slots (hostfile, ``-i host:3,1``), and
``--nproc-per-node gpu|auto`` counting this machine's GPUs (dslaunch/agent/ranks.py, dslaunch/oslib/gpus.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.gpu.launch import FACTS, Cuda, facts, launch, plan, visible_count

pytestmark = [pytest.mark.gpu, pytest.mark.torch, pytest.mark.launch]


def _expected_device(slots: list[str], local_rank: int, physical: int) -> str:
    count = visible_count(slots, physical)
    return f"cuda:{local_rank % count}" if count else "cpu"


def _check_ranks(found: dict[int, dict[str, Any]], slots: list[str], cuda: Cuda) -> None:
    world = len(slots)
    assert sorted(found) == list(range(world)), found
    for rank, entry in found.items():
        assert entry["cvd"] == ",".join(slots), entry  # every rank of the node gets the node's slots, in order
        assert entry["count_before"] == entry["count"] == visible_count(slots, cuda.count), entry
        assert entry["device"] == _expected_device(slots, entry["local_rank"], cuda.count), entry
        assert entry["backend"] == "gloo" and entry["cpu_sum"] == [world * (world + 1) / 2] * 2, entry
        if entry["device"] != "cpu":
            physical = int(slots[int(entry["device"].split(":")[1])])
            assert entry["uuid"] == cuda.uuids[physical] and entry["gpu_sum"] == 499500.0, entry
        print(f"rank {rank}: CUDA_VISIBLE_DEVICES={entry['cvd']} -> {entry['count']} device(s), {entry['device']}")


@pytest.mark.timeout(180)
@pytest.mark.parametrize("include", ["localhost:0,2,3", "localhost:3,1"])
def test_ranks_see_the_slots_the_plan_gives_them(tmp_path: Path, cuda: Cuda, include: str) -> None:
    """Ranks share the GPUs there are under gloo; slots past the last GPU hide the ones after them (CUDA's rule)."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=4\n")
    args = ["-H", str(hostfile), "-i", include, "--master-port", "0"]
    slots = plan(args)["nodes"][0]["slots"]
    assert slots == include.split(":")[1].split(","), slots  # never renumbered or sorted
    result = launch([*args, FACTS], env={"MODE": "gloo"})
    assert result.returncode == 0, result.stderr
    _check_ranks(facts(result.stdout), slots, cuda)


@pytest.mark.timeout(120)
def test_nproc_per_node_gpu_counts_this_machines_gpus(cuda: Cuda) -> None:
    every = [str(i) for i in range(cuda.count)]
    for args in (["--nproc-per-node", "gpu"], ["--nproc-per-node", "auto"], []):  # [] : the default, all GPUs
        planned = plan(args)
        assert planned["world_size"] == cuda.count, (args, planned)
        assert planned["nodes"][0]["slots"] == every, (args, planned)
    assert plan(["-i", "localhost:0"])["nodes"][0]["slots"] == ["0"]
    result = launch(["--nproc-per-node", "gpu", "--master-port", "0", FACTS])
    assert result.returncode == 0, result.stderr
    found = facts(result.stdout)
    assert sorted(found) == list(range(cuda.count)), result.stdout
    for rank, entry in found.items():
        assert entry["world"] == cuda.count and entry["cvd"] == ",".join(every), entry
        assert entry["device"] == f"cuda:{rank}" and entry["bound"] == f"cuda:{rank}", entry
        assert entry["cuda_backend"] == "ProcessGroupNCCL", entry
        assert entry["sum"] == [cuda.count * (cuda.count + 1) / 2] * 4, entry


@pytest.mark.timeout(120)
def test_two_ranks_nccl_across_two_gpus_in_the_order_asked(two_gpus: Cuda) -> None:
    """``-i localhost:1,0``: rank 0 runs on physical GPU 1, rank 1 on GPU 0, and NCCL joins them."""
    args = ["-i", "localhost:1,0", "--master-port", "0"]
    slots = plan(args)["nodes"][0]["slots"]
    assert slots == ["1", "0"], slots
    result = launch([*args, FACTS])
    assert result.returncode == 0, result.stderr
    found = facts(result.stdout)
    assert sorted(found) == [0, 1], result.stdout
    for rank, entry in found.items():
        assert entry["device"] == f"cuda:{rank}" and entry["cuda_backend"] == "ProcessGroupNCCL", entry
        assert entry["uuid"] == two_gpus.uuids[int(slots[rank])], entry
        assert entry["sum"] == [3.0] * 4 and entry["sum_device"] == f"cuda:{rank}", entry
