"""Core binding (``--bind-cores-to-rank``), as pure helpers shared by the CLI and the node agent.

The plan carries ``bind_cores``: None when binding is off,
``()`` to split the node's own usable cores (its CPU affinity, read on the
node), or the explicit list from ``--bind-core-list``. Each rank gets an
equal, contiguous slice and runs under ``numactl -C <slice>``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dslaunch.errors import DslaunchError
from dslaunch.limits import ascii_int


class CoreListError(DslaunchError):
    pass


def parse_core_list(text: str) -> tuple[int, ...]:
    """Parse ``1,3-5,7`` into ``(1, 3, 4, 5, 7)``; order kept, duplicates rejected."""
    cores: list[int] = []
    for raw in text.split(","):
        item = raw.strip()
        low, dash, high = item.partition("-")
        if ascii_int(low) is None or (dash and ascii_int(high) is None):
            raise CoreListError(f"bad item {item!r} in core list {text!r}: expected N or N-M, e.g. '0-3,8'")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise CoreListError(f"range {item!r} in core list {text!r} runs backwards: write {last}-{first}")
        cores.extend(range(first, last + 1))
    seen: set[int] = set()
    for core in cores:
        if core in seen:
            raise CoreListError(f"core list {text!r} names core {core} more than once")
        seen.add(core)
    return tuple(cores)


def compress(cores: Sequence[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"`` (numactl's syntax)."""
    parts: list[str] = []
    start = prev = None
    for core in cores:
        if prev is not None and core == prev + 1:
            prev = core
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = core
    if start is not None:
        parts.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(parts)


def usable_cores() -> tuple[int, ...]:
    """The cores this process may run on (cpuset/affinity aware, unlike a physical-core count)."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:
        return tuple(range(os.cpu_count() or 1))


def rank_cores(cores: Sequence[int], nproc: int, local_rank: int) -> tuple[int, ...]:
    """The contiguous slice of ``cores`` for one of ``nproc`` ranks; never empty."""
    if not cores:
        raise CoreListError("no cores to bind to")
    per_rank = len(cores) // nproc
    if per_rank < 1:  # more ranks than cores: share round-robin rather than fail on a remote node
        return (cores[local_rank % len(cores)],)
    return tuple(cores[local_rank * per_rank : (local_rank + 1) * per_rank])


def cores_for(bind_cores: Sequence[int] | None, nproc: int, local_rank: int) -> tuple[int, ...] | None:
    """The cores of one rank from the plan's ``bind_cores``, or None when binding is off."""
    if bind_cores is None:
        return None
    return rank_cores(tuple(bind_cores) or usable_cores(), nproc, local_rank)


def numactl_argv(cores: Sequence[int]) -> list[str]:
    return ["numactl", "-C", compress(cores)]
