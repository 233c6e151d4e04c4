"""Local runner: every node agent of the plan runs on this machine.

One node is the usual single-machine job; several nodes on one machine are
handy for trying multi-node plans (and for tests of cross-node fail-fast).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator

from dslaunch import _prctl
from dslaunch.plan import LaunchPlan
from dslaunch.runners.supervise import format_summary, supervise


def agent_argv(node_rank: int, python: str = sys.executable) -> list[str]:
    return [python, "-m", "dslaunch.agent", "--node-rank", str(node_rank)]


def _agent_preexec() -> None:
    _prctl.set_parent_death_signal(signal.SIGTERM)


class LocalAgent:
    """An agent subprocess: plan and stop requests go in on stdin, events come out on stdout."""

    def __init__(self, plan: LaunchPlan, node_rank: int) -> None:
        self.node_rank = node_rank
        self.host = plan.node(node_rank).host
        self.proc = subprocess.Popen(
            agent_argv(node_rank),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=plan.cwd or None,
            preexec_fn=_agent_preexec,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(plan.to_json().encode() + b"\n")
        self.proc.stdin.flush()
        self._stopped = False

    def lines(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            yield raw.decode("utf-8", "replace")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def signal(self, signum: int) -> None:
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        # The ranks' parent-death signal takes them down with the agent.
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class LocalRunner:
    name = "local"

    def describe(self, plan: LaunchPlan) -> list[str]:
        return [shlex.join(agent_argv(n.node_rank)) + "  < plan on stdin" for n in plan.nodes]

    def run(self, plan: LaunchPlan) -> int:
        handles = []
        _prctl.load()
        try:
            for node in plan.nodes:
                handles.append(LocalAgent(plan, node.node_rank))
        except OSError as exc:
            for h in handles:
                h.kill()
            print(f"dslaunch: cannot start the node agent: {exc}", file=sys.stderr)
            return 1
        outcome = supervise(plan, handles)
        summary = format_summary(outcome, plan)
        if summary:
            sys.stdout.flush()
            print(summary, file=sys.stderr, flush=True)
        return outcome.code


def free_port(host: str = "127.0.0.1") -> int:
    import socket  # noqa: PLC0415

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


__all__ = ["LocalRunner", "free_port", "agent_argv"]
