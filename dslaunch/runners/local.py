"""Local runner: every node agent of the plan runs on this machine.

One node is the usual single-machine job; several nodes on one machine are
handy for trying multi-node plans (and for tests of cross-node fail-fast).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from dslaunch.job.loop import supervise_and_report
from dslaunch.job.protocols import NodeAnswers, Runner
from dslaunch.job.result import START_FAILED, JobResult
from dslaunch.observe.session import status_line_of
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan
from dslaunch.runners.forked import LocalAgent, check_port_free, port_on_this_machine, run_here

if TYPE_CHECKING:
    from dslaunch.agent.preload.warm import WarmZygotes
    from dslaunch.observe.session import Observer


class LocalRunner(Runner):
    name = "local"

    def __init__(self) -> None:
        self._warm: WarmZygotes | None = None  # --preload with restarts: one zygote per node for the whole job

    def describe(self, plan: LaunchPlan) -> list[str]:
        return [f"node agent {n.node_rank} ({n.host}): forked from the launcher on this machine" for n in plan.nodes]

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        return run_here(plan, command)

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        if plan.master_port == 0:
            plan = plan.with_port(port_on_this_machine(plan.master_addr))
        else:
            check_port_free(plan.master_addr, plan.master_port)
        from dslaunch.agent.preload.warm import WarmZygotes

        handles = []
        prctl.load()
        prctl.set_child_subreaper()  # what a killed agent's ranks left behind comes to us (LocalAgent.wait)
        if self._warm is None:  # kept for every attempt of the job: the agents, forks of this process, get it
            self._warm = WarmZygotes()
        self._warm.prepare(plan)
        status_line = status_line_of(observer)
        try:
            for node in plan.nodes:
                handles.append(LocalAgent(plan, node.node_rank, self._warm.zygotes, status_line))
        except OSError as exc:  # fork or pipe refused (process or fd limits)
            for h in handles:
                h.kill()
            print(f"dslaunch: cannot start the node agent: {exc}", file=sys.stderr)
            return JobResult(START_FAILED, f"cannot start the node agent: {exc}")
        return supervise_and_report(plan, handles, None, observer)
