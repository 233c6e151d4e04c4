"""Rank script: build meshes for each spec given and check every dim and view against the pure layout.

Usage (under dslaunch): check_groups.py SPEC [SPEC...]; the first SPEC comes via the engine.
Prints one line "rank R: OK <n> checks" or raises on the first wrong group.
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed.device_mesh as dm

from dslaunch.mesh import EXPERT_VIEWS, NAMES, parse_spec, resolve
from dslaunch.mesh_build import build

calls = []
_real = dm.new_group


def counting_new_group(*args, **kwargs):
    calls.append(1)
    return _real(*args, **kwargs)


dm.new_group = counting_new_group

import dslaunch  # noqa: E402


def check(built, rank):
    layout, n = built.layout, 0
    for name in NAMES:
        if name in EXPERT_VIEWS and layout.ep == 1:
            continue
        expected = layout.group_of(name, rank)
        group = built.group(name)
        got = dist.get_process_group_ranks(group)
        assert got == expected, f"{layout.summary()}: {name} group of rank {rank} is {got}, expected {expected}"
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=group)
        assert t.item() == sum(expected), f"{name}: all_reduce(rank) = {t.item()}, expected {sum(expected)}"
        if name != "world":
            assert built.coordinate()[name] == expected.index(rank), f"{name}: coordinate {built.coordinate()[name]}"
        n += 1
    coord = built.root.get_coordinate()
    want = [layout.coordinate(rank)[d] for d in layout.active] or [0]
    assert list(coord) == want, f"root coordinate {coord} != {want}"
    return n


engine = dslaunch.engine(mesh=sys.argv[1])
rank, total, groups = engine.rank, 0, []
first = len(calls)
groups.append((engine.mesh_layout.summary(), first, engine.mesh_layout.new_group_count()))
total += check(engine.built_mesh, rank)
for text in sys.argv[2:]:
    layout = resolve(parse_spec(text), engine.world_size)
    before = len(calls)
    built = build(layout, "cpu", rank)
    groups.append((layout.summary(), len(calls) - before, layout.new_group_count()))
    total += check(built, rank)
for summary, made, predicted in groups:
    assert made == predicted, f"{summary}: {made} new_group calls, predicted {predicted}"
dist.barrier()
print(f"rank {rank}: OK {total} checks; new_group calls {[g[1] for g in groups]}", flush=True)
