"""What a runner is to the job core: the two protocols every transport implements (``dslaunch/runners/``): the
runner, which runs one attempt of a plan, and the handle on each node agent it starts, which ``job/loop.py`` reads.

Every runner subclasses :class:`Runner`, so it has ``close`` and ``probe`` whether it needs them or not: their
defaults here are a runner that keeps nothing across attempts and has no probe of its own. Each runs a command on
its nodes its own way (``run_on_nodes``: ``--preflight``, the hosts' probes), so nothing above the runners names a
transport."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from dslaunch.job.result import JobResult
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer
    from dslaunch.wire import Event

# By node rank: a command's (exit status, None where the node gave no answer; stdout; stderr) on that node.
NodeAnswers = dict[int, tuple[int | None, str, str]]


class Runner(Protocol):
    name: str

    def describe(self, plan: LaunchPlan) -> list[str]:
        """The commands this runner would run, secrets masked (for --dry-run)."""

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        """Run one attempt of the job: start it, supervise it, tear it down everywhere, and say how it ended.
        ``observer``: the job's (None: nothing is watched), passed on to ``job.loop.supervise``, and its status
        line to whoever draws it."""

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        """Run the shell ``command`` once on each node of ``plan``, apart from any job (``--preflight``'s probe,
        ``runners/preflight.py``), and say how each went."""
        raise NotImplementedError

    def address_of(self, plan: LaunchPlan, host: str) -> str:
        """The address the ranks reach ``host`` at: ``MASTER_ADDR`` when an elastic job's first host changes
        (``job/attempts.HostPool``). Only the runners of elastic jobs (ssh, pdsh, Slurm) have one."""
        raise NotImplementedError(f"--launcher {self.name} runs no elastic job")

    def close(self) -> None:
        """The job is over (``job/attempts.run_attempts``, once): end what was kept for every attempt (job agents,
        their connections). Default: nothing was kept."""
        return None

    def probe(self, plan: LaunchPlan, hosts: list[str]) -> dict[str, str] | None:
        """Check ``hosts`` of an elastic job as ``--preflight`` does: the ones that failed, with why. Default: None,
        this transport has no probe of its own (``runners.host_pool`` then uses ``--preflight``'s over ssh)."""
        return None


class AgentHandle(Protocol):
    """Every handle subclasses it, so each has ``node_ranks``."""

    node_rank: int
    host: str

    @property
    def node_ranks(self) -> tuple[int, ...]:
        """The node ranks whose events this handle carries: its own node's (mpirun's one handle carries every
        node's: ``runners/mpi.MpiJob``)."""
        return (self.node_rank,)

    def lines(self) -> Iterator[str | Event]:
        """The agent's stream until it closes, in whole lines (newlines kept): an event line alone,
        output lines one or more at a time (``wire.split_events``); or an event its handle has decoded and checked
        already (``pods/attempt.py``: 131,072 ranks' events at 16,384 pods, each encoded again and decoded again)."""

    def stop(self) -> None:
        """Ask the agent to tear its node down (idempotent)."""

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        """A requested stop (dslaunch got ``signum``): the agent signals each rank's main process, their process
        groups after --stop-grace; ``now``: end that grace at once (docs/stopping.md). The ranks that call
        ``should_stop()`` are not signalled: the agent proposes their stop step (``wire.StopStep``)."""

    def stop_at(self, step: int) -> None:
        """Tell the agent the job's stop step (``wire.control_stop_at``)."""

    def signal(self, signum: int) -> None:
        """Forward a signal (SIGUSR1/SIGUSR2; SIGQUIT: ask for the ranks' stacks) to the agent's ranks."""

    def kill(self) -> None:
        """Hard-stop the agent's transport."""

    def wait(self, timeout: float | None) -> int | None:
        """The agent's exit status, or None if still running after ``timeout``."""
