"""The launcher's side of hang detection and stacks on demand (docs/hangs.md).

Every agent reports (``wire.Idle``) when none of its ranks has made progress for ``--hang-timeout``. When
every node still running is idle, the job hangs: every rank is asked for its stack (SIGQUIT to each agent),
each agent reports its ranks' states (``wire.Stacks``), and, once all have or ``REPORT_WAIT`` has passed,
the job is stopped with ``HANG_EXIT`` and a summary naming the ranks that made the least progress.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.job.elastic import named
from dslaunch.plan import LaunchPlan

HANG_EXIT = 124  # as coreutils' timeout
REPORT_WAIT = 3.0  # after asking for stacks: how long to wait for every node's report


@dataclass(frozen=True)
class Hang:
    timeout: float
    culprits: tuple[tuple[int, str], ...]  # (rank, host)
    why: str  # how the culprits were picked
    unreported: tuple[int, ...]  # nodes that sent no stacks report
    traces: tuple[tuple[str, str], ...] = ()  # (host, path): the NCCL flight recorder dumps asked for
    ranks: int = 0  # the ranks this launcher stops: all, or its node's (one launcher per node)


class HangWatch:
    def __init__(self, plan: LaunchPlan, node_ranks: Collection[int]) -> None:
        """``node_ranks``: the nodes whose events the agents' handles this launcher runs carry (mpirun's one handle
        carries every node's: ``AgentHandle.node_ranks``)."""
        self.plan = plan
        # The nodes this launcher supervises: all of the plan's (one agent each, or mpirun for all of them), or,
        # one launcher per node (--node-rank, a Slurm task), its own: there the decision is that node's.
        every = len(node_ranks) == len(plan.nodes)
        self.nodes = set(range(len(plan.nodes))) if every else set(node_ranks)
        self.idle: dict[int, int] = {}  # node rank -> its live ranks, for the nodes that report no progress
        self.reports: dict[int, wire.Stacks] = {}
        self.asked_at: float | None = None

    def on_event(self, event: wire.Idle | wire.Stacks) -> None:
        if isinstance(event, wire.Idle):
            if event.idle:
                self.idle[event.node_rank] = event.live
            else:
                self.idle.pop(event.node_rank, None)
        elif self.asked_at is not None:
            self.reports[event.node_rank] = event

    def hung(self, finished: set[int]) -> bool:
        """Every node still running reports no progress for the timeout, and some rank is left to be hung."""
        if self.plan.hang_timeout is None or self.asked_at is not None:
            return False
        running = self.nodes - finished
        return bool(running) and running <= set(self.idle) and any(self.idle[n] for n in running)

    def declare(self, now: float) -> None:
        self.asked_at = now
        self.reports.clear()

    def settled(self, finished: set[int], now: float) -> bool:
        """Every running node has reported its stacks, or it is time to stop waiting."""
        assert self.asked_at is not None
        if not self.plan.transport.stacks_on_demand:
            return True
        return not self._unreported(finished) or now - self.asked_at > REPORT_WAIT

    def _unreported(self, finished: set[int]) -> tuple[int, ...]:
        return tuple(sorted(n for n in self.nodes - finished - set(self.reports) if self.idle.get(n, 1)))

    def result(self, finished: set[int]) -> Hang:
        assert self.plan.hang_timeout is not None
        ranks = [
            (r, state, count, age, rep.host) for rep in self.reports.values() for r, state, count, age in rep.ranks
        ]
        live = [x for x in ranks if x[1] != "exited"]
        waiting = [x for x in live if x[1] == "collective"]
        others = [x for x in live if x[1] != "collective"]
        if waiting and others:
            picked, why = others, "not in the collective the others wait in"
        elif live:
            least = min(x[2] for x in live)
            fewest = [x for x in live if x[2] == least]
            oldest = max(x[3] for x in fewest)
            picked = [x for x in fewest if x[3] >= oldest - 0.5]
            why = "fewest heartbeats, steps and output writes" + (
                "; all equal" if len(picked) == len(live) and len(live) > 1 else ""
            )
        else:
            refused = not self.plan.transport.stacks_on_demand
            picked, why = [], f"no stacks with --launcher {self.plan.launcher}" if refused else "no stacks report came"
        unreported = self._unreported(finished) if self.plan.transport.stacks_on_demand else ()
        traces = tuple((rep.host, path) for _, rep in sorted(self.reports.items()) for path in rep.traces)
        stopped = sum(self.plan.node(n).nproc for n in self.nodes)
        culprits = tuple(sorted((x[0], x[4]) for x in picked))
        return Hang(self.plan.hang_timeout, culprits, why, unreported, traces, stopped)


def summary(hang: Hang, plan: LaunchPlan, code: int) -> list[str]:
    shown = ", ".join(f"rank {rank} (host {host})" for rank, host in hang.culprits[:8])
    if len(hang.culprits) > 8:
        shown += f" and {len(hang.culprits) - 8} more"
    lines = [
        f"dslaunch: hang: no rank made progress for {hang.timeout:g} s; least progress: {shown or 'unknown'} "
        f"[{hang.why}]; stopped {_stopped(hang.ranks, plan.world_size)} (exit {code})"
    ]
    if hang.unreported:
        lines.append(f"dslaunch: no stacks report from node(s) {named([str(n) for n in hang.unreported])}")
    if hang.traces:
        shown = ", ".join(f"{host}:{path}" for host, path in hang.traces[:4])
        more = f" and {len(hang.traces) - 4} more like them" if len(hang.traces) > 4 else ""
        lines.append(
            f"dslaunch: NCCL flight recorder traces (each rank's line above says if it wrote one): {shown}{more}"
        )
    return lines


def _stopped(ranks: int, world: int) -> str:
    return f"all {world} ranks" if ranks in (0, world) else f"this node's {ranks} of {world} ranks"


def declared_line(plan: LaunchPlan) -> str:
    asking = "stopping the job" if stacks_line(plan) else "asking every rank for its stack"
    return f"dslaunch: hang: no rank made progress for {plan.hang_timeout:g} s: {asking}"


def stacks_line(plan: LaunchPlan) -> str | None:
    """What to print when stacks cannot be asked for with this launcher; None when they can."""
    if not plan.transport.stacks_on_demand:
        return f"dslaunch: stacks on demand are not available with --launcher {plan.launcher}"
    return None
