"""One launcher per node (``--nnodes N --node-rank R``, or torchrun's PET_* in a Kubernetes pod): this node's
agent, forked here, and, with other pods, this pod's side of each attempt (``pods/pod_launcher.py``: who
coordinates, joining, the job's attempt numbers; docs/kubernetes.md).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dslaunch.job.loop import report, supervise
from dslaunch.job.protocols import NodeAnswers, Runner
from dslaunch.job.result import JobResult
from dslaunch.observe.session import status_line_of
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan
from dslaunch.runners.forked import LocalAgent, check_port_free, run_here

if TYPE_CHECKING:
    from dslaunch.agent.preload.warm import WarmZygotes
    from dslaunch.observe.session import Observer
    from dslaunch.pods.pod_launcher import PodLauncher


class NodeRunner(Runner):
    name = "node"

    def __init__(self) -> None:
        self._pods: PodLauncher | None = None  # this pod's side of the job, kept for every attempt
        self._warm: WarmZygotes | None = None  # --preload with restarts: this node's zygote, kept for the job

    def describe(self, plan: LaunchPlan) -> list[str]:
        node_rank = plan.manual_node or 0
        if plan.pods.elastic:
            return [
                f"node agent: forked from the launcher on this machine, node rank given by the coordinator "
                f"({plan.pods.nnodes_min} to {plan.pods.nnodes_max} pods)",
                f"pods' control channel: the launcher on {plan.pods.coordinator} that takes port {plan.pods.port} "
                f"first coordinates; the others connect to it (join timeout {plan.pods.join_timeout:g} s)",
            ]
        lines = [f"node agent {node_rank}: forked from the launcher on this machine (this node only; no ssh)"]
        if len(plan.nodes) > 1:
            where = f"{plan.pods.coordinator}:{plan.pods.port}"
            role = f"listens on port {plan.pods.port}" if node_rank == 0 else f"connects to node 0 at {where}"
            lines.append(f"pods' control channel: this launcher {role} (join timeout {plan.pods.join_timeout:g} s)")
        return lines

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        return run_here(plan, command)  # every node's is here: a pod's plan is its own node's

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        node_rank = 0 if plan.pods.elastic else plan.manual_node or 0
        alone = (len(plan.nodes) == 1 or not plan.pods.port) and not plan.pods.elastic  # no control channel
        if not alone and self._pods is None:
            from dslaunch.pods.pod_launcher import PodLauncher

            self._pods = PodLauncher(self._agent)
        if self._pods is not None:
            self._pods.job_key(plan)  # taken out of the environment before a zygote inherits it
        if self._warm is None:
            from dslaunch.agent.preload.warm import WarmZygotes

            prctl.load()
            prctl.set_child_subreaper()  # what a killed agent's ranks left behind comes to us (LocalAgent.wait)
            self._warm = WarmZygotes()
        self._warm.prepare(plan, node_rank)  # warm while the pods join, and kept from attempt to attempt
        if self._pods is None:
            result = report(supervise(plan, [self._agent(plan, node_rank, None, observer)], None, observer), plan)
            # pods without a control channel decide alone and cannot agree: the budget only (docs/restarts.md)
            return result if len(plan.nodes) == 1 else replace(result, failures=())
        if self._pods.coordinating(plan, node_rank):
            check_port_free(plan.master_addr, plan.master_port)  # our rank 0 serves the rendezvous
            return self._pods.coordinate(plan, observer)
        return self._pods.join(plan, node_rank, observer)

    def _agent(self, plan: LaunchPlan, node_rank: int, warm_key: int | None, observer: Observer | None) -> LocalAgent:
        """This node's agent; ``warm_key``: the node rank its kept zygote was prepared under, if not ``node_rank``;
        it draws the job's status line, if any, on this pod's console."""
        zygotes = self._warm.zygotes if self._warm is not None else {}
        kept = zygotes.get(node_rank if warm_key is None else warm_key)
        return LocalAgent(plan, node_rank, {node_rank: kept} if kept is not None else None, status_line_of(observer))
