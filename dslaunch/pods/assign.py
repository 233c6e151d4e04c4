"""Which pods an attempt takes, and with which node ranks (pure): a fixed job's pods bring their node ranks; an
elastic one's (``--nnodes MIN:MAX``, torchrun's c10d shape) get them from the coordinator, survivors keeping
theirs, and pods beyond MAX wait as standbys (docs/kubernetes.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LAST_CALL = 2.0  # an elastic attempt with MIN pods waits this long for more, up to MAX (--rdzv-conf last_call_timeout)


@dataclass(frozen=True)
class Shape:
    nnodes_min: int
    nnodes_max: int
    fixed: bool  # the pods bring their node ranks (--node-rank): N = nnodes_max, no standbys
    last_call: float = LAST_CALL


@dataclass(frozen=True)
class Waiting:
    """A pod that has joined and waits for the next attempt."""

    key: int  # the order it joined in
    node_rank: int  # fixed: its node rank; elastic: the one it had in the last attempt, or -1
    host: str


def missing(shape: Shape, waiting: Sequence[Waiting]) -> set[int]:
    """A fixed job's node ranks that have not joined (the coordinator is node 0)."""
    return set(range(1, shape.nnodes_max)) - {w.node_rank for w in waiting}


def ready(shape: Shape, waiting: Sequence[Waiting], enough_since: float | None, now: float) -> bool:
    """Whether the next attempt can start: every node of a fixed job; MAX pods of an elastic one, or MIN of them
    for the last call (``enough_since``: when MIN were first there)."""
    if shape.fixed:
        return not missing(shape, waiting)
    pods = 1 + len(waiting)
    if pods >= shape.nnodes_max:
        return True
    return pods >= shape.nnodes_min and enough_since is not None and now - enough_since >= shape.last_call


def enough(shape: Shape, waiting: Sequence[Waiting]) -> bool:
    if shape.fixed:
        return not missing(shape, waiting)
    return 1 + len(waiting) >= shape.nnodes_min


def assign(shape: Shape, waiting: Sequence[Waiting]) -> tuple[dict[int, int], list[int]]:
    """Node ranks for the attempt (join key -> node rank; the coordinator is 0), and the standbys' keys."""
    if shape.fixed:
        return {w.key: w.node_rank for w in waiting}, []
    count = min(shape.nnodes_max, 1 + len(waiting))
    ordered = sorted(waiting, key=lambda w: w.key)
    ranks: dict[int, int] = {}
    taken: set[int] = set()
    for w in ordered:  # survivors keep their node rank where it still exists
        if 0 < w.node_rank < count and w.node_rank not in taken:
            ranks[w.key] = w.node_rank
            taken.add(w.node_rank)
    holes = iter(r for r in range(1, count) if r not in taken)
    standbys = []
    for w in ordered:
        if w.key in ranks:
            continue
        hole = next(holes, None)
        if hole is None:
            standbys.append(w.key)
        else:
            ranks[w.key] = hole
    return ranks, standbys
