"""Hostfiles and ``--include``/``--exclude`` filters, as pure functions.

A resource pool maps each host, in hostfile order, to its slot labels.
Slot labels are opaque strings (``"0"``, ``"3"``, ``"GPU-1c2f..."``): they
come from ``slots=N`` (``"0".."N-1"``) or from ``CUDA_VISIBLE_DEVICES`` and
are never renumbered or sorted, so the user's device order survives.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dslaunch.errors import DslaunchError
from dslaunch.limits import MAX_SLOTS_PER_HOST, MAX_WORLD_SIZE

ResourcePool = dict[str, tuple[str, ...]]

_HOST_LINE = re.compile(r"^(?P<host>\S+)\s+slots=(?P<slots>[0-9]+)(?P<rest>.*)$")
_EXTRA_TOKEN = re.compile(r"^[A-Za-z_][\w-]*=\S+$")


class HostfileError(DslaunchError):
    """A hostfile line that cannot be used; names the file, line and text."""

    def __init__(self, path: str, lineno: int | None, text: str | None, why: str) -> None:
        where = f"{path}:{lineno}" if lineno is not None else path
        shown = f" {text!r}" if text is not None else ""
        super().__init__(f"hostfile {where}{shown}: {why}")


class FilterError(DslaunchError):
    """A bad ``--include``/``--exclude``/``--num-*`` request."""


@dataclass(frozen=True)
class FilterItem:
    host: str
    slots: tuple[str, ...] | None  # None: the whole host


def parse_hostfile(text: str, path: str = "<hostfile>") -> ResourcePool:
    """Parse ``<host> slots=<n> [key=value ...] [# comment]`` lines."""
    pool: ResourcePool = {}
    world = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _HOST_LINE.match(line)
        if match is None:
            raise HostfileError(path, lineno, line, "expected '<host> slots=<n>', e.g. 'worker-0 slots=4'")
        rest = match["rest"].split("#", 1)[0].split()
        if match["rest"] and not match["rest"][0].isspace():
            raise HostfileError(path, lineno, line, "slots must be a whole number, e.g. 'slots=4'")
        bad = [token for token in rest if not _EXTRA_TOKEN.match(token)]
        if bad:
            raise HostfileError(path, lineno, line, f"unexpected text {bad[0]!r} after the slot count")
        host = match["host"]
        if host in pool:
            raise HostfileError(path, lineno, line, f"host {host!r} is listed more than once")
        slots = int(match["slots"])
        if slots > MAX_SLOTS_PER_HOST:
            raise HostfileError(
                path, lineno, line, f"slots={slots} is more than {MAX_SLOTS_PER_HOST} ranks on one host"
            )
        world += slots
        if world > MAX_WORLD_SIZE:
            raise HostfileError(path, lineno, line, f"the hosts so far have more than {MAX_WORLD_SIZE} slots in all")
        pool[host] = tuple(str(i) for i in range(slots))
    if not pool:
        raise HostfileError(path, None, None, "no hosts: the file is empty or has only comments")
    if not world:
        raise HostfileError(path, None, None, "every host has slots=0: nothing to run on")
    return pool


def parse_filter(spec: str) -> list[FilterItem]:
    """Parse ``NAME[:SLOT[,SLOT...]][@NAME[:SLOT...]...]``."""
    items: list[FilterItem] = []
    for part in spec.split("@"):
        host, sep, slot_text = part.partition(":")
        if not host or not host.strip() or host != host.strip():
            raise FilterError(f"bad host spec {part!r} in {spec!r}: expected NAME or NAME:SLOT[,SLOT...] between '@'")
        if not sep:
            items.append(FilterItem(host, None))
            continue
        slots = slot_text.split(",")
        if any(not s or ":" in s or s != s.strip() for s in slots):
            raise FilterError(f"bad slot list {slot_text!r} for host {host!r} in {spec!r}: expected SLOT[,SLOT...]")
        items.append(FilterItem(host, tuple(slots)))
    return items


def _check_item(pool: ResourcePool, item: FilterItem) -> None:
    if item.host not in pool:
        known = ", ".join(pool) or "(none)"
        raise FilterError(f"host {item.host!r} is not in the hostfile; known hosts: {known}")
    for slot in item.slots or ():
        if slot not in pool[item.host]:
            known = ",".join(pool[item.host]) or "(none)"
            raise FilterError(f"no slot {slot!r} on host {item.host!r}; its slots are: {known}")


def include(pool: ResourcePool, spec: str) -> ResourcePool:
    """Keep only what ``spec`` names: hosts in the pool's order, slots in the order given (``host:3,1`` stays
    ``3,1``: local rank 0 gets device 3), a whole host's slots in the pool's order."""
    wanted: dict[str, list[str]] = {}
    for item in parse_filter(spec):
        _check_item(pool, item)
        chosen = wanted.setdefault(item.host, [])
        for slot in item.slots if item.slots is not None else pool[item.host]:
            if slot not in chosen:
                chosen.append(slot)
    return {host: tuple(wanted[host]) for host in pool if host in wanted}


def exclude(pool: ResourcePool, spec: str) -> ResourcePool:
    """Drop what ``spec`` names; hosts left without slots are dropped."""
    dropped: dict[str, set[str]] = {}
    for item in parse_filter(spec):
        _check_item(pool, item)
        dropped.setdefault(item.host, set()).update(item.slots if item.slots is not None else pool[item.host])
    result = {host: tuple(s for s in slots if s not in dropped.get(host, ())) for host, slots in pool.items()}
    return {host: slots for host, slots in result.items() if slots}


def select(
    pool: ResourcePool,
    *,
    include_spec: str = "",
    exclude_spec: str = "",
    num_nodes: int | None = None,
    num_slots: int | None = None,
) -> ResourcePool:
    """Apply DeepSpeed's resource selection: a filter, or the first N nodes/slots."""
    if include_spec and exclude_spec:
        raise FilterError("--include and --exclude are mutually exclusive: give one of them")
    if (include_spec or exclude_spec) and (num_nodes is not None or num_slots is not None):
        raise FilterError("--num-nodes/--num-gpus cannot be combined with --include/--exclude: use one way of choosing")
    if include_spec:
        return include(pool, include_spec)
    if exclude_spec:
        return exclude(pool, exclude_spec)
    result = dict(pool)
    if num_nodes is not None:
        if num_nodes < 1:
            raise FilterError(f"--num-nodes must be at least 1, got {num_nodes}")
        if num_nodes > len(result):
            raise FilterError(
                f"--num-nodes {num_nodes} asks for more nodes than available ({len(result)}: {', '.join(result)})"
            )
        result = dict(list(result.items())[:num_nodes])
    if num_slots is not None:
        if num_slots < 1:
            raise FilterError(f"--nproc-per-node/--num-gpus must be at least 1, got {num_slots}")
        short = [f"{h} ({len(s)})" for h, s in result.items() if len(s) < num_slots]
        if short:
            raise FilterError(f"--nproc-per-node {num_slots} is more than the slots of: {', '.join(short)}")
        result = {host: slots[:num_slots] for host, slots in result.items()}
    return result
