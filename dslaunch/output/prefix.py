"""The prefix of each rank's output lines (pure): ``[rankR]: `` on one node, ``[HOST:rankR]: `` on several."""

from __future__ import annotations

from dslaunch.plan import LaunchPlan, NodePlan


def output_prefix(plan: LaunchPlan, node: NodePlan, local_rank: int) -> str:
    rank = node.ranks[local_rank]
    if len(plan.nodes) == 1:
        return f"[rank{rank}]: "
    return f"[{node.host}:rank{rank}]: "
