"""Inside an srun task (pure): which node of the plan this task is, and the step's port.

Acting on it (node agent or rank) is :mod:`dslaunch.runners.slurm.in_step`.
"""

from __future__ import annotations

from collections.abc import Mapping

from dslaunch.plan import LaunchPlan
from dslaunch.slurmlib import layout


def node_rank_of(plan: LaunchPlan, env: Mapping[str, str]) -> int:
    """This task's node in the plan: by Slurm node name, else by SLURM_NODEID."""
    name = env.get("SLURMD_NODENAME")
    for node in plan.nodes:
        if name and node.host == name:
            return node.node_rank
    nodeid = int(env.get("SLURM_NODEID", "-1"))
    if 0 <= nodeid < len(plan.nodes):
        return nodeid
    raise layout.SlurmLayoutError(f"this node ({name or 'unknown'}) is not one of the plan's nodes")


def resolve_port(plan: LaunchPlan, env: Mapping[str, str]) -> LaunchPlan:
    """Port 0 in a Slurm plan means: derive it from the job and step id, alike on every node."""
    if plan.master_port:
        return plan
    step = layout.read_step(env)
    return plan.with_port(layout.derive_port(step.job_id, step.step_id))
