"""The launcher's side of hang detection and stacks on demand (docs/hangs.md).

Every agent reports (``wire.Idle``) when none of its ranks has made progress for ``--hang-timeout``. When
every node still running is idle, the job hangs: every rank is asked for its stack (SIGQUIT to each agent),
each agent reports its ranks' states (``wire.Stacks``), and, once all have or ``REPORT_WAIT`` has passed,
the job is stopped with ``HANG_EXIT`` and a summary naming the ranks that made the least progress.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.plan import LaunchPlan

HANG_EXIT = 124  # as coreutils' timeout
REPORT_WAIT = 3.0  # after asking for stacks: how long to wait for every node's report
NO_STACKS = ("openmpi", "mpich")  # mpirun/mpiexec do not pass SIGQUIT on to the agents


@dataclass(frozen=True)
class Hang:
    timeout: float
    culprits: tuple[tuple[int, str], ...]  # (rank, host)
    why: str  # how the culprits were picked
    unreported: tuple[int, ...]  # nodes that sent no stacks report


class HangWatch:
    def __init__(self, plan: LaunchPlan, nodes: int) -> None:
        self.plan = plan
        self.nodes = nodes
        self.idle: set[int] = set()
        self.reports: dict[int, wire.Stacks] = {}
        self.asked_at: float | None = None

    def on_event(self, index: int, event: wire.Idle | wire.Stacks) -> None:
        if isinstance(event, wire.Idle):
            (self.idle.add if event.idle else self.idle.discard)(index)
        elif self.asked_at is not None:
            self.reports[index] = event

    def hung(self, finished: set[int]) -> bool:
        """Every node still running reports no progress for the timeout (checked until the hang is declared)."""
        if self.plan.hang_timeout is None or self.asked_at is not None:
            return False
        running = set(range(self.nodes)) - finished
        return bool(running) and running <= self.idle

    def declare(self) -> None:
        self.asked_at = time.monotonic()
        self.reports.clear()

    def settled(self, finished: set[int]) -> bool:
        """Every running node has reported its stacks, or it is time to stop waiting."""
        assert self.asked_at is not None
        waiting = set(range(self.nodes)) - finished - set(self.reports)
        return not waiting or time.monotonic() - self.asked_at > REPORT_WAIT

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
            picked, why = [], "no stacks report came"
        unreported = tuple(sorted(set(range(self.nodes)) - finished - set(self.reports)))
        return Hang(self.plan.hang_timeout, tuple(sorted((x[0], x[4]) for x in picked)), why, unreported)


def summary(hang: Hang, plan: LaunchPlan, code: int) -> list[str]:
    shown = ", ".join(f"rank {rank} (host {host})" for rank, host in hang.culprits[:8])
    if len(hang.culprits) > 8:
        shown += f" and {len(hang.culprits) - 8} more"
    lines = [
        f"dslaunch: hang: no rank made progress for {hang.timeout:g} s; least progress: {shown or 'unknown'} "
        f"[{hang.why}]; stopped all {plan.world_size} ranks (exit {code})"
    ]
    if hang.unreported:
        lines.append(f"dslaunch: no stacks report from node(s) {', '.join(map(str, hang.unreported))}")
    where = plan.log_dir or "the temp directory (TMPDIR, /tmp)"
    lines.append(
        f"dslaunch: NCCL flight recorder: ranks on NCCL dumped their collective trace to {where} on their host, "
        f"as dslaunch-{plan.run_id}.nccl-trace.rank<N> (each rank's 'flight recorder' line above says)"
    )
    return lines


def stacks_line(plan: LaunchPlan) -> str | None:
    """What to print when stacks cannot be asked for with this launcher; None when they can."""
    if plan.launcher in NO_STACKS:
        return f"dslaunch: stacks on demand are not available with --launcher {plan.launcher}"
    return None
