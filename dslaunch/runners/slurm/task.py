"""``python -m dslaunch.runners.slurm.task``: what each task of ``--launcher slurm``'s srun runs.

The plan is in its environment; the task runs its node as ``srun dslaunch`` would (``runners/slurm/in_step.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from dslaunch import wire
from dslaunch.plan import LaunchPlan
from dslaunch.runners.slurm import peer_signal
from dslaunch.slurmlib import layout
from dslaunch.slurmlib.lost_nodes import NODE_LOST_CODE
from dslaunch.slurmlib.task_plan import node_rank_of


def _with_local_gpus(plan: LaunchPlan, node_rank: int) -> LaunchPlan:
    """Use the GPU ids Slurm gave this task, when it gave enough of them."""
    visible = [s for s in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if s.strip()]
    node = plan.node(node_rank)
    if len(visible) < node.nproc:
        return plan
    nodes = list(plan.nodes)
    nodes[node_rank] = replace(node, slots=tuple(visible[: node.nproc]))
    return replace(plan, nodes=tuple(nodes))


def main(argv: list[str] | None = None) -> int:
    peer_signal.listen_in_step()  # before the imports of a node agent: a peer may fail while they run
    from dslaunch.runners.slurm.in_step import attempt_in_step

    parser = argparse.ArgumentParser(
        prog="python -m dslaunch.runners.slurm.task", description=f"reads the plan from ${wire.PLAN_VAR}"
    )
    parser.parse_args(argv)
    try:
        plan = wire.plan_from_env(os.environ)
    except wire.WireError as exc:
        print(f"dslaunch: {exc}", file=sys.stderr)
        return 2
    if plan is None:
        print(
            f"dslaunch: no launch plan in ${wire.PLAN_VAR}: this runs as a task of dslaunch's own srun step",
            file=sys.stderr,
        )
        return 2
    try:
        node_rank = node_rank_of(plan, os.environ)
    except layout.SlurmLayoutError as exc:
        print(f"dslaunch: {exc}", file=sys.stderr)
        return 2
    result = attempt_in_step(_with_local_gpus(plan, node_rank), last=True)  # srun mode: the launcher outside restarts
    # srun's report of this code tells the launcher outside to leave this node out (slurmlib/lost_nodes.py)
    return NODE_LOST_CODE if result.blamed else result.code


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
