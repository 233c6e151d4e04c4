"""Rank script (4 ranks, --mesh dp=2,tp=2): bad and inconsistent specs fail on every rank, then the
engine's mesh, comm, timers and the back-compat getters are checked, then every SPEC argument is built
and all its dims and views checked. Prints "rank R: <case> ..." lines."""

import sys
import time
import warnings

import meshcheck  # patches new_group before any mesh exists
import torch
import torch.distributed as dist

import dslaunch
from dslaunch.mesh import MeshConfigError


def attempt(case, mesh):
    start = time.monotonic()
    try:
        dslaunch.engine(mesh=mesh)
    except MeshConfigError as exc:
        print(f"rank {dist.get_rank()}: {case} failed after {time.monotonic() - start:.1f}s: {exc}", flush=True)
    else:
        raise AssertionError(f"{case}: engine(mesh={mesh!r}) did not fail")


import os  # noqa: E402

rank = int(os.environ["RANK"])
attempt("same-bad", "tp=3")
attempt("different", "tp=4" if rank == 3 else "tp=2")
attempt("one-bad", "tp=3" if rank == 1 else "tp=2")

e = dslaunch.engine()  # --mesh dp=2,tp=2 from the launcher
assert dslaunch.engine(mesh="dp=2,tp=2") is e
try:
    dslaunch.engine(mesh="tp=4")
    raise AssertionError("a second engine with another mesh was accepted")
except MeshConfigError as exc:
    assert "already exists" in str(exc)

tp_ranks = [rank - rank % 2, rank - rank % 2 + 1]
dp_ranks = [rank % 2, rank % 2 + 2]
assert tuple(e.mesh.mesh_dim_names) == ("dp_shard", "tp"), e.mesh
assert {
    n: e.size(n) for n in ("pp", "dp", "dp_shard", "dp_replicate", "tp", "cp", "sp", "ep", "mp", "dp_cp", "world")
} == {
    "pp": 1,
    "dp": 2,
    "dp_shard": 2,
    "dp_replicate": 1,
    "tp": 2,
    "cp": 1,
    "sp": 1,
    "ep": 1,
    "mp": 2,
    "dp_cp": 2,
    "world": 4,
}
assert e.coordinate["tp"] == rank % 2 and e.coordinate["dp"] == rank // 2, e.coordinate
assert dist.get_process_group_ranks(e.group("tp")) == tp_ranks
assert dist.get_process_group_ranks(e.group("cp")) == [rank]  # size 1: a singleton group

# comm: one check per collective, each against the expected group
t = e.comm.all_reduce(torch.tensor([float(rank)]), axis="dp")
assert t.item() == sum(dp_ranks), t
t = e.comm.all_reduce(torch.tensor([float(rank)]), axis="tp", op="avg")
assert t.item() == sum(tp_ranks) / 2, t
t = e.comm.all_reduce(torch.tensor([float(rank)]), axis="tp", op="max")
assert t.item() == max(tp_ranks), t
g = e.comm.all_gather(torch.tensor([rank, rank * 10]), axis="tp")
assert g.tolist() == [tp_ranks[0], tp_ranks[0] * 10, tp_ranks[1], tp_ranks[1] * 10], g
s = e.comm.reduce_scatter(torch.tensor([float(rank), float(rank * 10)]), axis="dp")
assert s.tolist() == [[sum(dp_ranks), sum(dp_ranks) * 10][e.coordinate["dp"]]], s
b = e.comm.broadcast(torch.tensor([rank]), axis="dp", src=1)
assert b.item() == dp_ranks[1], b
try:
    e.comm.broadcast(torch.tensor([rank]), axis="dp", src=2)
    raise AssertionError("broadcast from outside the group accepted")
except ValueError as exc:
    assert "src=2 is not a rank inside the group (0..1)" in str(exc), exc
a = e.comm.all_to_all(torch.tensor([rank * 10, rank * 10 + 1]), axis="tp")
assert a.tolist() == [tp_ranks[0] * 10 + rank % 2, tp_ranks[1] * 10 + rank % 2], a
e.comm.barrier(axis="tp")
e.comm.barrier()
# the deprecated dim= alias: the same group, and one DeprecationWarning per process, pointing at this script
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    t = e.comm.all_reduce(torch.tensor([float(rank)]), dim="dp")
    e.comm.barrier(dim="tp")
assert t.item() == sum(dp_ranks), t
assert [(w.category, os.path.basename(w.filename)) for w in caught] == [(DeprecationWarning, "engine_api.py")], caught
assert "engine.comm.all_reduce(dim=...) is deprecated, use axis='dp'" in str(caught[0].message), caught[0]
try:
    e.comm.all_reduce(torch.zeros(1), axis="model")
    raise AssertionError("unknown axis accepted")
except MeshConfigError as exc:
    assert "valid: pp, dp_replicate" in str(exc)

# timers
with e.timers("forward"):
    time.sleep(0.02)
with e.timers("forward"):
    time.sleep(0.01)
breakdown = e.timers.step()
assert breakdown["forward"] >= 0.03 and e.timers.breakdown() == {}, breakdown

# back-compat getters, all over the same groups
from dslaunch import compat  # noqa: E402
from dslaunch.compat import groups  # noqa: E402

assert compat.get_data_parallel_group() is e.group("dp")
assert compat.get_data_parallel_group(with_context_parallel=True) is e.group("dp")
assert compat.get_tensor_model_parallel_group() is e.group("tp")
assert compat.get_tensor_model_parallel_world_size() == 2 and compat.get_tensor_model_parallel_rank() == rank % 2
assert compat.get_tensor_model_parallel_src_rank() == tp_ranks[0]
assert compat.get_data_parallel_rank() == rank // 2 and compat.get_data_parallel_src_rank() == dp_ranks[0]
assert compat.get_pipeline_model_parallel_world_size() == 1 and compat.is_pipeline_first_stage()
assert compat.is_pipeline_last_stage() and compat.get_pipeline_model_parallel_next_rank() == rank
assert compat.get_model_parallel_world_size() == 2 and compat.get_model_parallel_group() is e.group("tp")
assert compat.get_context_parallel_world_size() == 1 and compat.get_context_parallel_global_ranks() == [rank]
assert groups._get_data_parallel_group() is e.group("dp")
assert groups._get_sequence_data_parallel_group() is e.group("dp")  # never None
assert groups._get_sequence_parallel_world_size() == 1
assert groups._get_expert_parallel_world_size("ep_size_1") == 1
assert groups._get_broadcast_src_rank() == dp_ranks[0]
assert groups.get_model_parallel_world_size() == 2  # DeepSpeed AutoTP: model parallel = tp
assert compat.mpu.get_data_parallel_world_size() == 2
assert not hasattr(compat.mpu, "initialize_sequence_parallel")
grid = compat.MeshGrid()
assert grid.topology().get_axis_names() == ["pipe", "data", "model"]
assert grid.get_slice_parallel_group() is e.group("tp") and grid.get_data_parallel_group() is e.group("dp")
assert grid.stage_to_global(0) == rank and grid.get_data_parallel_id() == rank // 2
assert grid.topology().get_rank_repr(rank) == f"model_{rank % 2:02d}"
t = torch.tensor([float(rank)])
dist.all_reduce(t, group=grid.get_data_parallel_group())
assert t.item() == sum(grid.dp_group), t
e.comm.barrier()
print(f"rank {rank}: engine api OK ({e.mesh_layout.summary()})", flush=True)
total = meshcheck.check(e.built_mesh, rank) + meshcheck.check_specs(sys.argv[1:], e.world_size, rank)
dist.barrier()
print(f"rank {rank}: OK {total} checks", flush=True)
