"""Rank script: check_groups.py SPEC [SPEC...]. The engine builds the first SPEC, the rest are built after it;
every dim and view of each is checked. Prints "rank R: OK <n> checks"."""

import sys

import meshcheck  # patches new_group before any mesh exists
import torch.distributed as dist

import dslaunch

engine = dslaunch.engine(mesh=sys.argv[1])
made, predicted = len(meshcheck.calls), engine.mesh_layout.new_group_count()
assert made == predicted, f"engine mesh: {made} new_group calls, predicted {predicted}"
total = meshcheck.check(engine.built_mesh, engine.rank)
total += meshcheck.check_specs(sys.argv[2:], engine.world_size, engine.rank)
dist.barrier()
print(f"rank {engine.rank}: OK {total} checks", flush=True)
