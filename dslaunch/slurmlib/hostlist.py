"""Slurm hostlist expressions: ``gpu[01-03,7],login1,rack[1-2]-n[1-2]`` (pure).

Follows Slurm's rules: a bracket holds comma-separated numbers and ranges,
a range keeps the zero padding of its lower bound, several brackets in one
name give their cross product, and top-level commas separate names.
"""

from __future__ import annotations

import itertools
import math

from dslaunch.errors import DslaunchError
from dslaunch.limits import ascii_int

MAX_HOSTS = 1_000_000  # refuse absurd expansions instead of eating memory
MAX_RANGE = 65_536  # Slurm's own limit on one bracket range (it refuses larger ones)


class HostlistError(DslaunchError):
    pass


def expand(expr: str) -> tuple[str, ...]:
    """Every host of ``expr``, in order (duplicates kept, as Slurm does)."""
    hosts: list[str] = []
    for name in _split_top(expr.strip()):
        hosts.extend(_expand_name(name, expr))
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"hostlist {expr!r} expands to more than {MAX_HOSTS} hosts")
    return tuple(hosts)


def first(expr: str) -> str:
    """The first host of ``expr`` (without expanding the rest)."""
    names = _split_top(expr.strip())
    if not names:
        raise HostlistError("empty hostlist")
    return _expand_name(names[0], expr)[0]


def _split_top(expr: str) -> list[str]:
    names, depth, start = [], 0, 0
    for i, ch in enumerate(expr):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in hostlist {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
        elif ch in ", " and depth == 0:
            names.append(expr[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unclosed '[' in hostlist {expr!r}")
    names.append(expr[start:])
    return [n for n in names if n]


def _expand_name(name: str, expr: str) -> list[str]:
    parts: list[list[str]] = []
    rest = name
    while "[" in rest:
        head, _, tail = rest.partition("[")
        body, _, rest = tail.partition("]")
        parts.append([head])
        parts.append(_expand_ranges(body, expr))
    parts.append([rest])
    if math.prod(len(p) for p in parts) > MAX_HOSTS:  # before the cross product is built
        raise HostlistError(f"hostlist {expr!r} expands to more than {MAX_HOSTS} hosts")
    return ["".join(p) for p in itertools.product(*parts)]


def _expand_ranges(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo, dash, hi = item.strip().partition("-")
        if ascii_int(lo) is None or (dash and ascii_int(hi) is None):
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}: use N or N-M with digits")
        if not dash:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"range {item!r} in hostlist {expr!r} runs backwards")
        if b - a + 1 > MAX_RANGE:
            raise HostlistError(f"range {item!r} in hostlist {expr!r} has more than {MAX_RANGE} hosts, as Slurm allows")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(n).zfill(width) for n in range(a, b + 1))
    return out
