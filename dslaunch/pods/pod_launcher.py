"""One launcher per pod, its side of each attempt (``runners/node.py`` is the runner, which forks this pod's agent):
the pods' control channel that makes the launchers one job, and who numbers the attempts.

One launcher coordinates: node rank 0's in a fixed job; in an elastic one (``--nnodes MIN:MAX``, or c10d without
a node rank) the one on the rendezvous endpoint's host that takes the port first. It waits for the other pods to
join each attempt, relays every pod's failed ranks and losses to the others, and ends the attempt on every pod
with one exit code. Every other launcher joins it and stops its ranks when the job stops, or when the
coordinator is gone (docs/kubernetes.md).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.job.attempts import stop_signals_caught
from dslaunch.job.elastic import named, pods_layout
from dslaunch.job.loop import report, supervise
from dslaunch.job.protocols import AgentHandle
from dslaunch.job.restart_policy import may_restart, may_start
from dslaunch.job.result import START_FAILED, JobResult, restart_cause, stopped
from dslaunch.job.state import Outcome
from dslaunch.mesh import MeshConfigError
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer
    from dslaunch.pods.attempt import AttemptPods
    from dslaunch.pods.coordinator import Coordinator

WAIT_NOTICE = 3.0  # a coordinator still waiting for pods this long says so, once

# (plan, node rank, the node rank its kept zygote was prepared under or None, the job's observer) -> this pod's agent
# for the attempt
NewAgent = Callable[[LaunchPlan, int, int | None, "Observer | None"], AgentHandle]


class PodLauncher:
    """This pod's launcher across the job's attempts: the job's key, the coordinator once this pod is it, and the
    attempts it took part in (the job's numbers)."""

    def __init__(self, new_agent: NewAgent) -> None:
        self._new_agent = new_agent
        self._key: bytes | None = None
        self._coordinator: Coordinator | None = None  # kept for every attempt of the job, once this pod is it
        self._seen = -1  # the last attempt this pod took part in
        self._node_rank = -1  # its node rank there (an elastic job's pod asks to keep it)
        self._results: list[JobResult] = []  # the attempts this pod took part in, numbered as the job's

    def coordinating(self, plan: LaunchPlan, node_rank: int) -> bool:
        """Whether this pod coordinates: node 0 of a fixed job; of an elastic one, the first on the endpoint's host
        to take the port."""
        if self._coordinator is not None:
            return True
        if not plan.pods.elastic:
            return node_rank == 0
        if not _is_this_host(plan.pods.coordinator):
            return False
        try:
            self._coordinator = self._listen(plan)
        except OSError:
            return False  # another pod here holds it
        return True

    def _listen(self, plan: LaunchPlan) -> Coordinator:
        from dslaunch.pods.assign import Shape
        from dslaunch.pods.coordinator import Coordinator
        from dslaunch.pods.shape import of_plan

        pods = plan.pods
        count = len(plan.nodes)
        shape = Shape(pods.nnodes_min or count, pods.nnodes_max or count, not pods.elastic, pods.last_call)
        coordinator = Coordinator(self.job_key(plan), plan.run_id, shape, agreed=of_plan(plan))
        coordinator.listen(pods.port)
        return coordinator

    def job_key(self, plan: LaunchPlan) -> bytes:
        if self._key is None:
            from dslaunch.channel import secret

            given = secret.take(os.environ)
            if given is None:
                _say(secret.UNSET_WARNING)
            self._key = secret.key(given, plan.run_id)
        return self._key

    def coordinate(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        if self._coordinator is None:
            try:
                self._coordinator = self._listen(plan)
            except OSError as exc:
                _say(f"dslaunch: cannot take the pods' control port {plan.pods.port}: {exc.strerror or exc}")
                return stopped(START_FAILED, f"control port {plan.pods.port} unavailable")
        coordinator = self._coordinator
        # From the gathering to supervise's own handlers a stop signal is held, then handed to supervise: the
        # pods' start and the agent's fork take longer the more pods there are, and a SIGTERM there killed the
        # coordinator outright (docs/scale.md)
        with stop_signals_caught() as early:
            begun = self._begin(plan, coordinator, observer)
            if isinstance(begun, JobResult):
                return begun
            plan, attempt, pods, local = begun
            outcome = supervise(plan, [local, pods] if len(pods) else [local], None, observer, caught=early)
        if outcome.signal is not None and outcome.stopped_by is None:  # the pods stopped on our word: say why
            name = wire.exit_code_of(-outcome.signal)[1]
            why = f"its launcher (the coordinator) received {name}"
            coordinator.relay(wire.NodeLost(0, plan.node(0).host, -outcome.signal, why), 0)
        result = replace(report(outcome, plan), attempt=attempt)
        self._results.append(result)
        verdict = may_restart(self._results, plan.restarts, plan.no_restart_on)
        if verdict.say:
            _say(f"dslaunch: not restarting: {verdict.why}")
        last = not verdict.restart
        coordinator.finish(result.code, last, result.cause)
        if last:
            coordinator.close(result.code)
        cause = restart_cause(result.code, lost=outcome.lost_node is not None, ranks=outcome.root_cause is not None)
        # decided here, for every pod
        return replace(result, retry=result.retry and not last, failures=(), restart_cause=cause)

    def _begin(
        self, plan: LaunchPlan, coordinator: Coordinator, observer: Observer | None
    ) -> JobResult | tuple[LaunchPlan, int, AttemptPods, AgentHandle]:
        """The next attempt started on the pods it takes and our own agent: its plan, number, pods and agent;
        or how the job ends before it."""
        from dslaunch.pods.member import Forwarding

        waited = self._gather(plan, coordinator)
        if waited is not None:
            return waited
        # A recreated coordinator goes on from the attempt the pods last saw: one count for the job
        attempt = max(plan.restarts.count, coordinator.seen + 1, self._seen + 1)
        allowed = may_start(attempt, plan.restarts)
        if not allowed.restart:  # a recreated coordinator finds the job's budget spent
            coordinator.close(START_FAILED, allowed.why)
            _say(f"dslaunch: not restarting: {allowed.why}")
            return stopped(START_FAILED, allowed.why)
        try:
            pods, hosts = coordinator.start(attempt, plan.node(0).host, lambda hosts: pods_layout(plan, 0, hosts))
        except MeshConfigError as exc:
            coordinator.close(START_FAILED, f"cannot start: {exc.message}")
            _say(f"dslaunch: cannot start: {exc.message}")
            return stopped(START_FAILED, "the mesh does not fit the pods")
        plan = pods_layout(plan, 0, hosts).attempt(attempt) if plan.pods.elastic else plan.attempt(attempt)
        for pod in pods:  # each pod speaks for its own ranks only (pods/messages.py)
            pod.ranks = frozenset(plan.node(pod.node_rank).ranks)
        if attempt and plan.pods.elastic:
            where = named(hosts)
            _say(f"dslaunch: attempt {attempt + 1} runs on {len(hosts)} pods ({plan.world_size} ranks): {where}")
        self._seen, self._node_rank = attempt, 0
        local = Forwarding(
            self._new_agent(plan, 0, None, observer), lambda event: coordinator.relay(event, 0), to_coordinator=False
        )
        return plan, attempt, pods, local

    def _gather(self, plan: LaunchPlan, coordinator: Coordinator) -> JobResult | None:
        """Wait for the pods the next attempt needs; None once they are there, else how the job ends."""
        deadline = time.monotonic() + plan.pods.join_timeout
        with stop_signals_caught() as caught:
            ready = coordinator.gather(min(deadline, time.monotonic() + WAIT_NOTICE), caught)
            if not ready and not caught and not coordinator.mismatch:
                _say(f"dslaunch: waiting for {coordinator.lacking()} to join (up to {plan.pods.join_timeout:g} s)")
                ready = coordinator.gather(deadline, caught)
        if ready and not caught:
            return None
        why = "the coordinator was stopped" if caught else f"{coordinator.lacking()} did not join in time"
        why = coordinator.mismatch or why  # a pod refused for its shape (pods/shape.py): no wait for it
        coordinator.close(START_FAILED, why)
        if caught:
            return stopped(128 + caught[0], "received a signal while the pods joined")
        timeout = "" if coordinator.mismatch else f" (--rdzv-conf join_timeout={plan.pods.join_timeout:g})"
        _say(f"dslaunch: cannot start: {why}{timeout}")
        return stopped(START_FAILED, why)

    def join(self, plan: LaunchPlan, node_rank: int, observer: Observer | None) -> JobResult:
        from dslaunch.pods.member import CoordinatorLink, Ended, Forwarding, Orphaned, join
        from dslaunch.pods.messages import encoded
        from dslaunch.pods.shape import of_plan

        address = (plan.pods.coordinator, plan.pods.port)
        asked = self._node_rank if plan.pods.elastic else node_rank
        me = (asked, plan.node(node_rank).host, self._seen)
        key = self.job_key(plan)
        with stop_signals_caught() as caught:
            given, timeout = of_plan(plan), plan.pods.join_timeout
            pods = plan.pods.nnodes_max or len(plan.nodes)  # as the coordinator's Shape counts them
            joined = join(
                address,
                key,
                plan.run_id,
                me,
                deadline=time.monotonic() + timeout,
                stopped=caught,
                shape=given,
                pods=pods,
            )
            while isinstance(joined, Orphaned) and not caught:  # a standby keeps standing by for the job
                _say(f"dslaunch: {joined.why}; joining again (up to {timeout:g} s)")
                deadline = time.monotonic() + timeout
                joined = join(address, key, plan.run_id, me, deadline=deadline, stopped=caught, shape=given, pods=pods)
        if caught or isinstance(joined, Orphaned):
            return stopped(128 + caught[0], "stopped while joining the job")
        if isinstance(joined, Ended):
            return stopped(joined.code, "" if not joined.code else "the job ended while this pod stood by")
        if isinstance(joined, str):
            _say(f"dslaunch: cannot join the job: {joined}")
            return stopped(START_FAILED, joined)
        if plan.pods.elastic:
            plan = pods_layout(plan, joined.node_rank, joined.every_host(plan.node(0).host))
        plan = plan.attempt(joined.attempt)  # the job's attempt, also on a pod that joined late
        self._seen, self._node_rank = joined.attempt, joined.node_rank
        local = Forwarding(
            self._new_agent(plan, joined.node_rank, node_rank, observer),
            lambda event: joined.link.send_raw(encoded(event)),
            to_coordinator=True,
        )
        coordinator = CoordinatorLink(joined, local)
        outcome = supervise(plan, [local, coordinator], None, observer, decides_stop_step=False)
        if coordinator.verdict is not None and outcome.signal is None:
            outcome = replace(outcome, code=coordinator.verdict[0])
        # The coordinator decides for every pod; without it, the job's count alone (the failures left out).
        result = replace(_report_member(outcome, plan, coordinator.cause), attempt=joined.attempt, failures=())
        self._results.append(result)
        if coordinator.verdict is not None:
            result = replace(result, retry=not coordinator.verdict[1] and result.retry)
        elif not may_restart(self._results, plan.restarts).restart:  # the coordinator is gone: the job's count
            result = replace(result, retry=False)
        return result


def _report_member(outcome: Outcome, plan: LaunchPlan, cause: str) -> JobResult:
    """A pod's summary: its own, unless it knows no more than the code (the coordinator decided, e.g. a hang):
    then the coordinator's words."""
    known = outcome.root_cause or outcome.lost_node or outcome.signal is not None or outcome.hang or outcome.stopped_by
    if outcome.code == 0 or known or not cause:
        # the coordinator relays the failures alone (pods/attempt.py): this pod counts its own ranks' ends
        return report(outcome, replace(plan, transport=replace(plan.transport, supervises_own_node=True)))
    _say(f"dslaunch: job failed on every pod (exit {outcome.code}): {cause}")
    return JobResult(outcome.code, cause)


def _is_this_host(host: str) -> bool:
    """Whether ``host`` names an address of this machine (one it can bind)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _type, _proto, _name, addr in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((addr[0], 0))
            return True
        except OSError:
            continue
    return False


def _say(text: str) -> None:
    from dslaunch.output.sink import STALL, write_within

    sys.stdout.flush()
    write_within(2, (text + "\n").encode(), STALL)
