"""Manual multi-node mode (``--node-rank N``): run only node N's agent here, with no ssh at all."""

from __future__ import annotations

from dslaunch.job.loop import supervise_and_report
from dslaunch.job.result import JobResult
from dslaunch.plan import LaunchPlan
from dslaunch.runners.local import LocalAgent, check_port_free


class NodeRunner:
    name = "node"

    def describe(self, plan: LaunchPlan) -> list[str]:
        node_rank = plan.manual_node or 0
        return [f"node agent {node_rank}: forked from the launcher on this machine (this node only; no ssh)"]

    def run(self, plan: LaunchPlan) -> JobResult:
        node_rank = plan.manual_node or 0
        if node_rank == 0:  # node 0's rank 0 serves the rendezvous
            check_port_free(plan.master_addr, plan.master_port)
        return supervise_and_report(plan, [LocalAgent(plan, node_rank)])
