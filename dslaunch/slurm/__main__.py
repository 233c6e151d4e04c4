"""``python -m dslaunch.slurm --plan-b64 B64``: what each task of ``--launcher slurm``'s srun runs."""

from __future__ import annotations

import argparse
import base64
import os
import sys
from dataclasses import replace

from dslaunch.plan import LaunchPlan
from dslaunch.slurm import layout
from dslaunch.slurm.step import node_rank_of, run_node


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
    parser = argparse.ArgumentParser(prog="python -m dslaunch.slurm")
    parser.add_argument("--plan-b64", required=True)
    args = parser.parse_args(argv)
    plan = LaunchPlan.from_json(base64.urlsafe_b64decode(args.plan_b64.encode()).decode())
    try:
        node_rank = node_rank_of(plan, os.environ)
    except layout.SlurmLayoutError as exc:
        print(f"dslaunch: {exc}", file=sys.stderr)
        return 2
    return run_node(_with_local_gpus(plan, node_rank))


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
