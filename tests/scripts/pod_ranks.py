"""Torch ranks of a two-pod job: all-reduce rank+1 over the world; FAIL_RANK exits 7 before the all-reduce."""

import os

import torch
import torch.distributed as dist

import dslaunch

engine = dslaunch.engine()
if engine.rank == int(os.environ.get("FAIL_RANK", "-1")):
    # At once, not sys.exit: at exit the bootstrap destroys the process group first, and a peer that sees
    # the connection close can fail and be reaped before this rank is, which would make it the root cause.
    os._exit(7)
value = torch.tensor([float(engine.rank + 1)])
dist.all_reduce(value)
print(f"rank={engine.rank} node={os.environ['NODE_RANK']} world={engine.world_size} sum={value.item():.0f}", flush=True)
