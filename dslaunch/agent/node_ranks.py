"""One node's rank processes as the node loop (``agent/node_loop.py``) holds them: each started (exec'd, or forked by
the ``--preload`` zygote), its pipes handed to the output pump and its pidfd to the loop's selector, reaped, and at
the end swept with everything else the job left on this node (docs/teardown.md). The loop decides; this carries out.
"""

from __future__ import annotations

import os
import selectors
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from dslaunch.agent.node_io import kill_descendants, killpg, pidfd_of, popen_rank
from dslaunch.oslib import procs
from dslaunch.oslib.owner_only import private_open
from dslaunch.output.prefix import output_prefix
from dslaunch.output.pump import OutputPump
from dslaunch.plan import LaunchPlan, NodePlan

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping

    from dslaunch.agent.preload.client import ForkedRank, Zygote

    RankProc = subprocess.Popen[bytes] | ForkedRank


@dataclass
class RankProcess:
    """A started rank as the loop knows it: its process, error file, log files and stderr tail."""

    rank: int
    local_rank: int
    proc: RankProc
    pid: int
    pidfd: int | None
    prefix: bytes
    error_file: str
    waiter: int | None = None  # a warm zygote's rank is its waiter's child, not the agent's (preload/warm.py)
    stdout_log: IO[bytes] | None = None
    stderr_log: IO[bytes] | None = None
    tail: bytes = b""  # the last failures.TAIL_BYTES of its stderr
    reaped: bool = False


class NodeRanks:
    """This node's ranks, in start order; ``kept``: a zygote this agent keeps for the next attempt, which the sweep
    spares (agent/job_agent.py)."""

    def __init__(self, plan: LaunchPlan, node: NodePlan, sel: selectors.BaseSelector, output: OutputPump) -> None:
        self.plan = plan
        self.node = node
        self.sel = sel  # the loop's: a pidfd is registered with ("exit", its RankProcess)
        self.output = output
        self.by_rank: dict[int, RankProcess] = {}
        self.kept: set[int] = set()

    def __iter__(self) -> Iterator[RankProcess]:
        return iter(self.by_rank.values())

    def __getitem__(self, rank: int) -> RankProcess:
        return self.by_rank[rank]

    def spawn(
        self, local_rank: int, argv: Sequence[str], env: Mapping[str, str], error_file: str, zygote: Zygote | None
    ) -> RankProcess:
        """Start one rank: forked by ``zygote`` where it can, else exec'd; ``OSError`` where it cannot start."""
        rank = self.node.ranks[local_rank]
        forked = zygote.spawn(argv, env, self.plan.cwd, rank) if zygote is not None else None
        proc: RankProc = forked or popen_rank(list(argv), env, self.plan.cwd)
        r = RankProcess(
            rank=rank,
            local_rank=local_rank,
            proc=proc,
            pid=proc.pid,
            pidfd=pidfd_of(proc.pid),
            prefix=output_prefix(self.plan, self.node, local_rank).encode(),
            error_file=error_file,
            waiter=forked.waiter if forked is not None else None,
        )
        if self.plan.log_dir:
            r.stdout_log = private_open(os.path.join(self.plan.log_dir, f"rank{rank}.stdout.log"), "ab")
            r.stderr_log = private_open(os.path.join(self.plan.log_dir, f"rank{rank}.stderr.log"), "ab")
        self.by_rank[rank] = r
        assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE) always gives them
        self.output.add(rank, r.prefix, proc.stdout, proc.stderr, (r.stdout_log, r.stderr_log))
        if r.pidfd is not None:
            self.sel.register(r.pidfd, selectors.EVENT_READ, ("exit", r))
        return r

    def unwatched(self) -> list[RankProcess]:
        """The ranks still running that have no pidfd: the loop polls them."""
        return [r for r in self if r.pidfd is None and not r.reaped]

    def exit_code(self, r: RankProcess, *, block: bool) -> int | None:
        """``r``'s exit code once it has ended (waited for with ``block``), its pidfd then closed; None: running."""
        returncode = r.proc.wait() if block else r.proc.poll()
        if returncode is None:
            return None
        r.reaped = True
        if r.pidfd is not None:
            self.sel.unregister(r.pidfd)
            os.close(r.pidfd)
            r.pidfd = None
        return returncode

    def kill(self) -> None:
        """SIGKILL to each rank's session: what a teardown leaves once the grace is over."""
        for r in self:
            killpg(r.pid, signal.SIGKILL)

    def sweep(self) -> None:
        """The end: the log files closed, and every descendant killed (the agent is a subreaper, so double-forked
        daemons are among them), then, as a backstop, any process with this job's run id and node rank."""
        for r in self:
            for log in (r.stdout_log, r.stderr_log):
                if log is not None:
                    log.close()
        self.kill_descendants()
        procs.kill_job(self.plan.run_id, self.node.node_rank)

    def kill_descendants(self) -> None:
        """What the ranks started that is still there (it may hold their pipes open); the ranks and a kept zygote
        are spared. A warm rank's children are below its waiter (preload/warm.py)."""
        waiters = [r.waiter for r in self if r.waiter is not None]
        kill_descendants((os.getpid(), *waiters), spared={*(r.pid for r in self), *self.kept})
