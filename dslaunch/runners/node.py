"""One launcher per node (``--nnodes N --node-rank R``, or torchrun's PET_* in a Kubernetes pod): this node's
agent, forked here, and the pods' control channel that makes the N launchers one job (``dslaunch/pods/``).

Node rank 0's launcher coordinates: it waits for the other pods to join each attempt, relays every pod's rank
exits and losses to the others, and ends the attempt on every pod with one exit code. Every other launcher joins
it and stops its ranks when the job stops, or when the coordinator is gone (docs/kubernetes.md).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.job.attempts import stop_signals_caught
from dslaunch.job.loop import report, supervise
from dslaunch.job.result import START_FAILED, JobResult, stopped
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan
from dslaunch.runners.local import LocalAgent, check_port_free

if TYPE_CHECKING:
    from dslaunch.agent.preload.warm import WarmZygotes

WAIT_NOTICE = 3.0  # a coordinator still waiting for pods this long says so, once


class NodeRunner:
    name = "node"

    def __init__(self) -> None:
        self._key: bytes | None = None
        self._coordinator: object | None = None  # pods.coordinator.Coordinator, kept for every attempt
        self._seen = -1  # the last attempt this pod took part in
        self._warm: WarmZygotes | None = None  # --preload with restarts: this node's zygote, kept for the job

    def describe(self, plan: LaunchPlan) -> list[str]:
        node_rank = plan.manual_node or 0
        lines = [f"node agent {node_rank}: forked from the launcher on this machine (this node only; no ssh)"]
        if len(plan.nodes) > 1:
            where = f"{plan.pods.coordinator}:{plan.pods.port}"
            role = f"listens on port {plan.pods.port}" if node_rank == 0 else f"connects to node 0 at {where}"
            lines.append(f"pods' control channel: this launcher {role} (join timeout {plan.pods.join_timeout:g} s)")
        return lines

    def run(self, plan: LaunchPlan) -> JobResult:
        node_rank = plan.manual_node or 0
        if node_rank == 0:  # node 0's rank 0 serves the rendezvous
            check_port_free(plan.master_addr, plan.master_port)
        if self._warm is None:
            from dslaunch.agent.preload.warm import WarmZygotes

            prctl.load()
            self._warm = WarmZygotes()
        self._warm.prepare(plan, node_rank)  # warm while the pods join, and kept from attempt to attempt
        if len(plan.nodes) == 1:
            return report(supervise(plan, [self._agent(plan, node_rank)]), plan)
        key = self._job_key(plan)
        return self._coordinate(plan, key) if node_rank == 0 else self._join(plan, key, node_rank)

    def _agent(self, plan: LaunchPlan, node_rank: int) -> LocalAgent:
        return LocalAgent(plan, node_rank, self._warm.zygotes if self._warm is not None else None)

    def _job_key(self, plan: LaunchPlan) -> bytes:
        if self._key is None:
            from dslaunch.pods import secret

            given = secret.take(os.environ)
            if given is None:
                _say(secret.UNSET_WARNING)
            self._key = secret.key(given, plan.run_id)
        return self._key

    def _coordinate(self, plan: LaunchPlan, key: bytes) -> JobResult:
        from dslaunch.pods.coordinator import Coordinator
        from dslaunch.pods.member import Forwarding

        coordinator = self._coordinator
        if not isinstance(coordinator, Coordinator):
            coordinator = Coordinator(key, plan.run_id, {n.node_rank for n in plan.nodes[1:]})
            try:
                coordinator.listen(plan.pods.port)
            except OSError as exc:
                _say(f"dslaunch: cannot take the pods' control port {plan.pods.port}: {exc.strerror or exc}")
                return stopped(START_FAILED, f"control port {plan.pods.port} unavailable")
            self._coordinator = coordinator
        deadline = time.monotonic() + plan.pods.join_timeout
        with stop_signals_caught() as caught:
            missing = coordinator.gather(min(deadline, time.monotonic() + WAIT_NOTICE), caught)
            if missing and not caught:
                _say(f"dslaunch: waiting for node(s) {_ranks(missing)} to join (up to {plan.pods.join_timeout:g} s)")
                missing = coordinator.gather(deadline, caught)
        if caught or missing:
            why = "the coordinator was stopped" if caught else f"node(s) {_ranks(missing)} did not join in time"
            coordinator.close()
            if caught:
                return stopped(128 + caught[0], f"received {caught[0]} while the pods joined")
            _say(f"dslaunch: cannot start: {why} (--rdzv-conf join_timeout={plan.pods.join_timeout:g})")
            return stopped(START_FAILED, why)
        # A recreated coordinator goes on from the attempt the pods last saw: one count for the job
        plan = plan.attempt(max(plan.restarts.count, coordinator.seen + 1))
        pods = coordinator.start(plan.restarts.count, plan.node(0).host)
        local = Forwarding(self._agent(plan, 0), lambda event: coordinator.relay(event, 0), to_coordinator=False)
        outcome = supervise(plan, [local, *pods])
        if outcome.signal is not None:  # the pods stopped on our word: tell them why before the end
            name = wire.exit_code_of(-outcome.signal)[1]
            why = f"its launcher (the coordinator) received {name}"
            coordinator.relay(wire.NodeLost(0, plan.node(0).host, -outcome.signal, why), 0)
        result = report(outcome, plan)
        last = not result.failed or not result.retry or plan.restarts.count >= plan.restarts.max_restarts
        coordinator.finish(result.code, last)
        if last:
            coordinator.close()
        return replace(result, retry=result.retry and not last)

    def _join(self, plan: LaunchPlan, key: bytes, node_rank: int) -> JobResult:
        from dslaunch.pods.member import CoordinatorLink, Forwarding, join

        address = (plan.pods.coordinator, plan.pods.port)
        me = (node_rank, plan.node(node_rank).host, self._seen)
        deadline = time.monotonic() + plan.pods.join_timeout
        with stop_signals_caught() as caught:
            joined = join(address, key, plan.run_id, me, deadline=deadline, stopped=caught)
        if caught:
            return stopped(128 + caught[0], "stopped while joining the job")
        if isinstance(joined, str):
            _say(f"dslaunch: cannot join the job: {joined}")
            return stopped(START_FAILED, joined)
        plan = plan.attempt(joined.attempt)  # the job's attempt, also on a pod that joined late
        self._seen = joined.attempt
        local = Forwarding(
            self._agent(plan, node_rank),
            lambda event: joined.link.send_raw(wire.encode(event).encode()),
            to_coordinator=True,
        )
        coordinator = CoordinatorLink(joined, local)
        outcome = supervise(plan, [local, coordinator])
        if coordinator.verdict is not None and outcome.signal is None:
            outcome = replace(outcome, code=coordinator.verdict[0])
        result = report(outcome, plan)
        if coordinator.verdict is not None:
            result = replace(result, retry=not coordinator.verdict[1] and result.retry)
        return result


def _ranks(ranks: set[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))


def _say(text: str) -> None:
    from dslaunch.output.sink import STALL, write_within

    sys.stdout.flush()
    write_within(2, (text + "\n").encode(), STALL)
