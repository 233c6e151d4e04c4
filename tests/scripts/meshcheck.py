"""Shared by the rank scripts: count new_group calls and check a built mesh against its pure layout."""

import warnings

import torch
import torch.distributed as dist
import torch.distributed.device_mesh as dm

from dslaunch.bootstrap.mesh_build import build
from dslaunch.mesh import NAMES, parse_spec, resolve

calls = []
_real = dm.new_group


def _counting_new_group(*args, **kwargs):
    if not kwargs.get("use_local_synchronization"):  # the lazy singleton group is not a world-wide call
        calls.append(1)
    return _real(*args, **kwargs)


dm.new_group = _counting_new_group  # DeviceMesh calls new_group through its module namespace
dist.new_group = _counting_new_group  # mesh_build's embedding groups


def check(built, rank):
    """Every dim and view: member ranks, all_reduce(rank) = sum of the group, coordinates. Returns #checks."""
    layout, n = built.layout, 0
    for name in NAMES:
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
    n += check_names_on_root(built, rank)
    coord = built.root.get_coordinate()
    want = [layout.coordinate(rank)[d] for d in layout.active] or [0]
    assert list(coord) == want, f"root coordinate {coord} != {want}"
    return n


def check_names_on_root(built, rank):
    """The root mesh knows every dim and view larger than 1 by name, as torchtitan's flattened names: root[name]
    and root.get_group(name) are that name's group (docs/mesh.md, "What is built")."""
    layout, n = built.layout, 0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Slicing a flattened dim from root mesh")
        for name in NAMES:
            if name == "world" or layout.size(name) == 1:
                continue
            expected = layout.group_of(name, rank)
            for how, group in (("root[name]", built.root[name].get_group()), ("get_group", built.root.get_group(name))):
                got = dist.get_process_group_ranks(group)
                assert got == expected, f"{layout.summary()}: {how} {name} of rank {rank} is {got}, expected {expected}"
            n += 1
    return n


def check_specs(specs, world, rank):
    """Build each spec after the engine's mesh; check groups and that new_group calls match the prediction."""
    total = 0
    for text in specs:
        layout = resolve(parse_spec(text), world)
        before = len(calls)
        built = build(layout, "cpu", rank)
        made = len(calls) - before
        assert made == layout.new_group_count(), (
            f"{layout.summary()}: {made} new_group calls, predicted {layout.new_group_count()}"
        )
        total += check(built, rank)
    return total
