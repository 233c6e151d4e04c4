"""One attempt on a node agent that lives for the job, and the job's agents by host (transport-neutral).

An agent is anything with the ``JobAgent`` protocol: the ssh runner's (a paramiko channel) and the pdsh
runner's (a connection the agent dialled back, its output through pdsh). The attempt's stream ends at the
agent's end-of-attempt marker (``wire.ATTEMPT_END``), not at the end of the agent's stream; an agent whose stream
ended otherwise is dead and never given another attempt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Protocol

from dslaunch import wire
from dslaunch.job.protocols import AgentHandle
from dslaunch.output.sink import STALL
from dslaunch.plan import LaunchPlan

END_WAIT = 4 * STALL  # how long an attempt's end waits for its stderr to catch up with its stdout
CLOSE_WAIT = 5.0  # how long the job's end waits for an agent to exit after its control channel's EOF


class JobAgent(Protocol):
    host: str
    dead: bool  # its stream ended outside an attempt's end
    err_ended: threading.Event  # the attempt's stderr is all here (its end marker came)

    def events(self) -> Iterator[str]:
        """The agent's output and event lines, across attempts, until it ends."""
        ...

    def send(self, data: bytes) -> bool:
        """Whole lines on its control channel; False when that is gone."""
        ...

    def usable(self) -> bool:
        """Whether it can take another attempt."""
        ...

    def status(self) -> int | None:
        """None while it runs; its exit status once it ended (START_FAILED when its transport is lost)."""
        ...

    def abort(self) -> None:
        """End it now, from this side: it tears its node down."""
        ...

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """The job is over: EOF on its control channel ends it and its zygote; then its transport."""
        ...


def start(agent: JobAgent, plan: LaunchPlan, node_rank: int) -> Attempt:
    agent.err_ended.clear()
    agent.send(wire.job_run(node_rank, plan))
    return Attempt(agent, node_rank)


class Attempt(AgentHandle):
    """One attempt on a job agent (an ``AgentHandle``, ``job/protocols.py``)."""

    def __init__(self, agent: JobAgent, node_rank: int) -> None:
        self.agent = agent
        self.node_rank = node_rank
        self.host = agent.host
        self.reported = False  # the agent sent its Done for this attempt
        self.ended = False  # ... and its end marker: the agent waits for the next attempt
        self.code: int | None = None
        self._stopped = False

    def lines(self) -> Iterator[str]:
        end = wire.ATTEMPT_END + "\n"
        for text in self.agent.events():
            if text == end:
                self.ended = True
                self.agent.err_ended.wait(END_WAIT)
                return
            if text.startswith(wire.MARKER):
                event = wire.decode(text)
                if isinstance(event, wire.Done):
                    self.reported, self.code = True, event.code
            yield text
        self.agent.dead = True

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.agent.send(wire.control_stop())

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        if not self._stopped:
            self.agent.send(wire.control_request_stop(signum, now))

    def stop_at(self, step: int) -> None:
        if not self._stopped:
            self.agent.send(wire.control_stop_at(step))

    def signal(self, signum: int) -> None:
        if not self._stopped:
            self.agent.send(wire.control_signal(signum))

    def kill(self) -> None:
        self.agent.dead = True
        self.agent.abort()

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.ended and self.code is not None:
                return self.code
            status = self.agent.status()
            if status is not None:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.02)


class JobAgents:
    """The job's job agents, by host."""

    def __init__(self) -> None:
        self.by_host: dict[str, JobAgent] = {}

    def lacking(self, hosts: list[str]) -> list[str]:
        """Which of ``hosts`` need a new agent: none yet, or one that can no longer take an attempt (dropped)."""
        for host in hosts:
            agent = self.by_host.get(host)
            if agent is not None and not agent.usable():
                self.drop(host)
        return [host for host in dict.fromkeys(hosts) if host not in self.by_host]

    def drop(self, host: str) -> None:
        agent = self.by_host.pop(host, None)
        if agent is not None:
            agent.abort()

    def after(self, attempts: list[Attempt]) -> None:
        """Drop the agents whose attempt did not reach its end: they are gone, or no longer trusted."""
        for attempt in attempts:
            if not attempt.ended:
                self.drop(attempt.host)

    def close(self) -> None:
        """The job is over: every agent ends (in parallel), with its zygote."""
        agents, self.by_host = list(self.by_host.values()), {}
        threads = [threading.Thread(target=agent.close, daemon=True) for agent in agents]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(CLOSE_WAIT + 1)
