"""A torchtitan-style step, written for ``init_device_mesh(..., mesh_dim_names=("dp", "tp"))`` and run unchanged on
dslaunch's mesh: each result must equal the one on torch's own mesh of those names (test_torchtitan_names.py).
"""

import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

import dslaunch
from dslaunch.bootstrap.mesh_build import build
from dslaunch.mesh import parse_spec, resolve

warnings.filterwarnings("ignore", message="Slicing a flattened dim from root mesh")  # torch's, as for torchtitan's


def data_parallel(world_mesh):
    """What a torchtitan-style trainer asks of its mesh for data loading and gradient reduction."""
    dp_mesh = world_mesh["dp"]
    grad = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(grad, group=dp_mesh.get_group())
    members = dist.get_process_group_ranks(world_mesh.get_group("dp"))
    return dp_mesh.get_local_rank(), dp_mesh.size(), grad.item(), members


def tensor_parallel(world_mesh):
    tp_mesh = world_mesh["tp"]
    both = world_mesh["dp", "tp"]
    activation = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(activation, group=tp_mesh.get_group())
    return tp_mesh.get_local_rank(), tp_mesh.size(), activation.item(), tuple(both.shape), both.get_coordinate()


def main():
    engine = dslaunch.engine()  # --mesh dp=2,tp=2
    rank = engine.rank
    ours = engine.mesh
    theirs = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    assert data_parallel(ours) == data_parallel(theirs), (data_parallel(ours), data_parallel(theirs))
    assert tensor_parallel(ours) == tensor_parallel(theirs), (tensor_parallel(ours), tensor_parallel(theirs))
    one_d = build(resolve(parse_spec("dp=4"), 4), "cpu", rank).root  # a 1-D mesh: root dim dp_shard, dp by name
    flat = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    assert data_parallel(one_d) == data_parallel(flat), (data_parallel(one_d), data_parallel(flat))
    hsdp = build(resolve(parse_spec("dp_replicate=2,dp_shard=2"), 4), "cpu", rank).root
    assert data_parallel(hsdp) == (rank, 4, 6.0, [0, 1, 2, 3]), data_parallel(hsdp)  # dp: a flattened view
    print(f"rank {rank}: torchtitan-style OK", flush=True)


if __name__ == "__main__":
    main()
