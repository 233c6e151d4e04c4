"""Torch ranks: MODE=engine lets dslaunch.engine() initialise; MODE=adopt makes its own group first."""

import os

import torch
import torch.distributed as dist

import dslaunch

if os.environ.get("MODE") == "adopt":
    dist.init_process_group("gloo")
engine = dslaunch.engine()
assert engine is dslaunch.engine(), "the engine is built once per process"
value = torch.tensor([float(engine.rank + 1)])
dist.all_reduce(value)
expected = engine.world_size * (engine.world_size + 1) / 2
print(
    f"rank={engine.rank} local_rank={engine.local_rank} world={engine.world_size} device={engine.device} "
    f"backend={engine.backend} owns={engine.owns_process_group} sum={value.item():.0f} ok={value.item() == expected}"
)
