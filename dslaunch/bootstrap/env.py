"""Who am I? Rank facts from whatever started this process (pure, no torch).

dslaunch and torchrun set ``RANK``/``WORLD_SIZE``/...; srun sets ``SLURM_*``;
a plain ``python script.py`` is a world of one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RankInfo:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    master_addr: str | None
    master_port: int | None
    source: str  # "dslaunch", "torchrun", "env", "slurm" or "single"


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise ValueError(f"environment variable {name} is missing")
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def detect(env: Mapping[str, str] | None = None) -> RankInfo:
    env = os.environ if env is None else env
    port = env.get("MASTER_PORT")
    if "RANK" in env and "WORLD_SIZE" in env:
        source = "dslaunch" if "DSLAUNCH_RUN_ID" in env else "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
        world = _int(env, "WORLD_SIZE")
        return RankInfo(
            rank=_int(env, "RANK"),
            local_rank=_int(env, "LOCAL_RANK", 0),
            world_size=world,
            local_world_size=_int(env, "LOCAL_WORLD_SIZE", world),
            node_rank=_int(env, "NODE_RANK", _int(env, "GROUP_RANK", 0)),
            master_addr=env.get("MASTER_ADDR"),
            master_port=int(port) if port else None,
            source=source,
        )
    from dslaunch.slurmlib import address, layout

    if layout.in_step(env):  # a batch script has SLURM_PROCID too, but is no rank
        step = layout.read_step(env)
        return RankInfo(
            rank=step.procid,
            local_rank=step.localid,
            world_size=step.ntasks,
            local_world_size=step.tasks_per_node[step.nodeid],
            node_rank=step.nodeid,
            master_addr=env.get("MASTER_ADDR") or address.node_address(step.hosts[0], env),
            master_port=int(port) if port else layout.derive_port(step.job_id, step.step_id),
            source="slurm",
        )
    return RankInfo(0, 0, 1, 1, 0, env.get("MASTER_ADDR"), int(port) if port else None, "single")
