"""A real gloo rank: all_reduce across every node, print where it ran."""

import socket

import torch
import torch.distributed as dist

import dslaunch

dslaunch.engine()
value = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(value)
world = dist.get_world_size()
print(
    f"host={socket.gethostname()} rank={dist.get_rank()} world={world} sum={value.item():.0f} "
    f"ok={value.item() == world * (world + 1) / 2}",
    flush=True,
)
dist.barrier()
