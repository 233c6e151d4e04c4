"""Warm restarts: with ``--preload`` and ``--max-restarts``, the local launcher keeps one zygote per node for
the whole job, so a restart forks its ranks from a process that has imported the modules already.

A zygote started by the launcher outlives each attempt's node agent, so the ranks it forks cannot become the
agent's children (only a process's ancestors can adopt it). Each rank gets a *waiter* instead: the intermediate
process of the double fork stays, as the rank's parent and a child subreaper (what the rank double-forks stays
below it). The waiter writes the rank's exit code on a pipe the agent reads (:class:`client.ForkedRank`), and
when the agent is gone, however it went, it kills the rank's process group and everything below itself, and
exits (waiter.py). The agent's teardown also kills what is below each waiter (node_ranks.py). The zygote's
parent-death signal is on the launcher, which closes it when it exits (:meth:`WarmZygotes.close_all`, atexit);
the zygote waits for its waiters first. A zygote lacks ``NODE_RANK`` in its own environment
(``client._process_env``), so the per-node sweep at each attempt's end (procs.kill_job) leaves it alone.

Before each attempt after the first the launcher asks every zygote whether it can still fork (the same checks
as before every fork: one thread, no accelerator); one that cannot is replaced, with a one-line warning.

The kept zygotes live in a :class:`WarmZygotes` that the local runner owns for the job and hands to each attempt's
agents (forks of the launcher) as an argument: no module global crosses that fork. docs/preload.md, docs/restarts.md.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from dslaunch.agent.preload import client

if TYPE_CHECKING:
    from dslaunch.plan import LaunchPlan


# ---- the launcher's side ----------------------------------------------------------------------------------


def wanted(plan: LaunchPlan) -> bool:
    """A warm zygote pays off only when an attempt can follow; without restarts the agent's own one serves."""
    return bool(plan.preload) and not plan.program.no_python and plan.restarts.max_restarts > 0


CHECK_TIMEOUT = 5.0  # seconds for a kept zygote to answer the check; one that does not is hung: killed, replaced


def check(zygote: client.Zygote, timeout: float = CHECK_TIMEOUT) -> str | None:
    """Why ``zygote`` must not fork another attempt's ranks, or None."""
    if zygote.proc is None or zygote.proc.poll() is not None:
        return "the preloaded process is gone"
    zygote.sock.settimeout(timeout)
    try:
        reply = zygote.request({"check": True})
    except TimeoutError:
        zygote.proc.kill()
        return f"the preloaded process did not answer within {timeout:g} s"
    except (OSError, ValueError) as exc:
        return f"the preloaded process is gone ({exc})"
    finally:
        zygote.sock.settimeout(None)
    return None if reply.get("ok") is True else str(reply.get("fallback") or "the preloaded process is gone")


class WarmZygotes:
    """The launcher's zygotes, one per node for the whole job: the local runner owns it for the job, and hands
    :attr:`zygotes` to each attempt's node agents (forks of the launcher) as an argument (client.for_node)."""

    def __init__(self) -> None:
        # node rank -> its zygote (None: it could not start one, and said why)
        self.zygotes: dict[int, client.Zygote | None] = {}

    def prepare(
        self, plan: LaunchPlan, only: int | None = None, key: int | None = None, host: str | None = None
    ) -> None:
        """Before an attempt: every node of ``plan`` (or node rank ``only``: one launcher per node) has its zygote,
        started now or kept from the last attempt if it can still fork (else replaced, with a warning). Runs in the
        launcher's main thread (the parent-death signal of the zygote follows the thread that started it).
        ``key``: keep ``only``'s zygote under this key instead of its node rank (a host whose node rank changes
        from attempt to attempt keeps one zygote), and ``host``: the host it runs on, in its ``DSLAUNCH_HOST`` (a
        spare's zygote is readied with another node's plan)."""
        if not wanted(plan) or plan.bind_cores is not None:
            return  # the agent says why it does not preload (client.for_node)
        for node in plan.nodes if only is None else (plan.node(only),):
            kept_as = node.node_rank if key is None else key
            if kept_as in self.zygotes and self.zygotes[kept_as] is None:
                continue  # it could not start: said once
            kept = self.zygotes.get(kept_as)
            if kept is not None:
                why = check(kept)
                if why is None:
                    continue
                print(f"dslaunch: warning: {kept.label}: replaced for this attempt: {why}", file=sys.stderr, flush=True)
                kept.close()
            self.zygotes[kept_as] = self._start(plan, node.node_rank, host)

    def _start(self, plan: LaunchPlan, node_rank: int, host: str | None = None) -> client.Zygote | None:
        import atexit

        from dslaunch.agent import ranks

        if not self.zygotes:
            atexit.register(self.close_all)
        node = plan.node(node_rank)
        env = ranks.rank_env(plan, node, 0, os.environ, os.devnull)  # the zygote itself never writes an error file
        if host is not None:
            env["DSLAUNCH_HOST"] = host
        return client.start(plan.preload, plan.program.python, env, plan.cwd, node.host, warm=True)

    def close_all(self) -> None:
        """End every warm zygote (with the job): each waits for its waiters, whose agents are gone by now."""
        for node_rank, kept in list(self.zygotes.items()):
            if kept is not None:
                kept.close()
            del self.zygotes[node_rank]
