"""Who am I? Rank facts from whatever started this process (pure, no torch).

dslaunch and torchrun set ``RANK``/``WORLD_SIZE``/...; srun sets ``SLURM_*``;
a plain ``python script.py`` is a world of one.
"""

from __future__ import annotations

import os
import re
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


def first_slurm_host(nodelist: str) -> str:
    """First host of a Slurm nodelist such as ``gpu[03-05,9],cpu1``."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if match is None:
        raise ValueError(f"cannot read Slurm nodelist {nodelist!r}")
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


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
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "localhost"
        job = _int(env, "SLURM_JOB_ID", 0)
        return RankInfo(
            rank=_int(env, "SLURM_PROCID"),
            local_rank=_int(env, "SLURM_LOCALID", 0),
            world_size=_int(env, "SLURM_NTASKS"),
            local_world_size=_int(env, "SLURM_NTASKS_PER_NODE", 1) if env.get("SLURM_NTASKS_PER_NODE", "").isdigit() else 1,
            node_rank=_int(env, "SLURM_NODEID", 0),
            master_addr=env.get("MASTER_ADDR") or first_slurm_host(nodelist),
            master_port=int(port) if port else 20000 + job % 20000,
            source="slurm",
        )
    return RankInfo(0, 0, 1, 1, 0, env.get("MASTER_ADDR"), int(port) if port else None, "single")
