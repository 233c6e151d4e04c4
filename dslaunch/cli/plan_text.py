"""Human-readable plan text (pure); secrets masked with :mod:`dslaunch.masking`."""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from dslaunch.masking import mask, mask_value
from dslaunch.plan import LaunchPlan


def _ranges(ranks: tuple[int, ...]) -> str:
    if not ranks:
        return "-"
    return f"{ranks[0]}" if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


def plan_text(plan: LaunchPlan, commands: list[str], secrets: AbstractSet[str] = frozenset()) -> str:
    p = plan.program
    kind = "module" if p.module else "executable" if p.no_python else "script"
    lines = [
        f"dslaunch plan (dry run, nothing started): run {plan.run_id}",
        f"  launcher     {plan.launcher}",
        f"  world size   {plan.world_size} rank(s) on {len(plan.nodes)} node(s)",
        f"  rendezvous   {plan.master_addr}:{plan.master_port if plan.master_port else '(free port at launch)'}",
        f"  {kind:<12} {p.target} {' '.join(p.args)}".rstrip(),
        "  nodes:",
    ]
    width = max(len(n.host) for n in plan.nodes)
    for n in plan.nodes:
        lines.append(
            f"    node {n.node_rank:<3} {n.host:<{width}}  slots {','.join(n.slots):<12} ranks {_ranges(n.ranks)}"
        )
    lines += _elastic_lines(plan)
    if plan.env:
        lines.append("  rank environment:")
        lines += [f"    {k}={mask_value(k, v, secrets)}" for k, v in plan.env]
    lines.append("  commands:")
    lines += [f"    {mask(c, secrets)}" for c in commands]
    return "\n".join(lines)


def _elastic_lines(plan: LaunchPlan) -> list[str]:
    """Which hosts are active and which are spares (docs/elastic.md)."""
    e = plan.elastic
    if not e.candidates:
        return []
    count = f"{e.nnodes_min}" if e.nnodes_min == e.nnodes_max else f"{e.nnodes_min} to {e.nnodes_max}"
    return [
        f"  node count   {count} node(s): every host probed at launch; a failed node is left out of later attempts",
        f"  active       {', '.join(n.host for n in plan.nodes)}",
        f"  spares       {', '.join(e.spares) or 'none'}",
    ]
