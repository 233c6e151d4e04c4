"""Rank script: megatron_groups.py SPEC [SPEC...] (4 ranks). For each SPEC (tp, pp, cp, ep, etp given), runs
megatron-core's initialize_model_parallel and builds the dslaunch mesh, then compares every group getter's
rank list, size and rank. The first SPEC is the engine's own mesh; the rest are built and swapped in.
Prints "rank R: OK <n> groups"."""

import dataclasses
import inspect
import sys

import torch.distributed as dist
from megatron.core import parallel_state as ps

import dslaunch
from dslaunch import compat
from dslaunch.bootstrap import engine as engine_module
from dslaunch.bootstrap.mesh_build import build
from dslaunch.mesh import parse_spec, resolve

# (getter name, keyword arguments): group, and when Megatron has them, world size and rank getters.
GROUPS = [
    ("tensor_model_parallel", {}),
    ("pipeline_model_parallel", {}),
    ("data_parallel", {}),
    ("data_parallel", {"with_context_parallel": True}),
    ("context_parallel", {}),
    ("model_parallel", {}),
    ("tensor_and_data_parallel", {}),
    ("tensor_and_data_parallel", {"with_context_parallel": True}),
    ("embedding", {}),
    ("position_embedding", {}),
    ("expert_model_parallel", {}),
    ("expert_tensor_parallel", {}),
    ("expert_tensor_and_model_parallel", {}),
    ("expert_data_parallel", {}),
]


def ranks_of(group):
    return None if group is None else dist.get_process_group_ranks(group)


def compare(text, rank):
    spec = parse_spec(text)
    sizes = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    ps.initialize_model_parallel(
        tensor_model_parallel_size=sizes["tp"],
        pipeline_model_parallel_size=sizes["pp"],
        context_parallel_size=sizes["cp"],
        expert_model_parallel_size=sizes["ep"],
        expert_tensor_parallel_size=sizes["etp"],  # None: Megatron's default, = tp
    )
    n = 0
    for name, kwargs in GROUPS:
        theirs = getattr(ps, f"get_{name}_group")
        # check_initialized=False: None where Megatron has no group for this rank (middle pipeline stages)
        quiet = {"check_initialized": False} if "check_initialized" in inspect.signature(theirs).parameters else {}
        want = ranks_of(theirs(**kwargs, **quiet))
        got = ranks_of(getattr(compat, f"get_{name}_group")(**kwargs, **quiet))
        assert got == want, f"{text}: rank {rank} {name}{kwargs or ''} group {got}, megatron-core {want}"
        for what in ("world_size", "rank"):
            if want is not None and hasattr(ps, f"get_{name}_{what}") and name != "model_parallel":
                theirs = getattr(ps, f"get_{name}_{what}")(**kwargs)
                ours = getattr(compat, f"get_{name}_{what}")(**kwargs)
                assert ours == theirs, f"{text}: rank {rank} {name}_{what}{kwargs or ''} {ours}, megatron-core {theirs}"
        n += 1
    for name in ("embedding", "position_embedding"):
        ours, theirs = getattr(compat, f"is_rank_in_{name}_group")(), getattr(ps, f"is_rank_in_{name}_group")()
        assert ours == theirs, f"{text}: rank {rank} is_rank_in_{name}_group {ours}, megatron-core {theirs}"
    ps.destroy_model_parallel()
    ps._EMBEDDING_GLOBAL_RANKS = None  # megatron-core 0.16.1's destroy_model_parallel leaves it set
    return n


engine = dslaunch.engine(mesh=sys.argv[1])
total = 0
for index, text in enumerate(sys.argv[1:]):
    if index:
        built = build(resolve(parse_spec(text), engine.world_size), "cpu", engine.rank)
        engine_module._engine = dataclasses.replace(engine_module._engine, built_mesh=built)
    total += compare(text, engine.rank)
dist.barrier()
print(f"rank {engine.rank}: OK {total} groups", flush=True)
