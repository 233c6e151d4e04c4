"""Node agents that live for the job over ssh (``--max-restarts`` > 0): one agent per host, started once, to which
each attempt is a line on the channel it already has (agent/job_agent.py).

A restart therefore costs no ssh handshake, no new session and no new agent, and with ``--preload`` no import: the
host's zygote stays warm. Stops, signals and stack requests go on the same channel as for a one-attempt agent.
A host whose agent did not end its attempt (its connection dropped, the agent was killed) is dropped from the job's
agents; if a later attempt needs it again, it gets a new agent. EOF on an agent's stdin ends it: the job's end
(:meth:`LiveAgent.close`), the launcher's death or a lost connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from dslaunch import wire
from dslaunch.job.result import START_FAILED
from dslaunch.output.sink import STALL
from dslaunch.plan import LaunchPlan
from dslaunch.remote import common
from dslaunch.runners.ssh.connect import RECV

END_WAIT = 4 * STALL  # how long an attempt's end waits for its stderr to catch up with its stdout
CLOSE_WAIT = 5.0  # how long the job's end waits for an agent to exit after its stdin's EOF


class LiveAgent:
    """The job-lifetime agent on one host: its connection, its channel and its two streams."""

    def __init__(self, host: str, conn: Any, command: str) -> None:
        self.host = host
        self.conn = conn
        self.channel = conn.client.get_transport().open_session()
        self.channel.exec_command(command)
        self._events = wire.split_events(iter(lambda: self.channel.recv(RECV), b""))
        self._lock = threading.Lock()
        self.err_ended = threading.Event()  # the attempt's stderr is all here
        self.dead = False  # its stream ended outside an attempt's end: never given another attempt
        threading.Thread(target=self._relay_err, name=f"stderr {host}", daemon=True).start()

    def usable(self) -> bool:
        transport = self.channel.get_transport()
        return not (self.dead or self.channel.closed or self.channel.exit_status_ready()) and bool(
            transport is not None and transport.is_active()
        )

    def start(self, plan: LaunchPlan, node_rank: int) -> Attempt:
        self.err_ended.clear()
        self.send(wire.job_run(node_rank, plan))
        return Attempt(self, node_rank)

    def stand_by(self, plan: LaunchPlan) -> None:
        self.send(wire.job_standby(plan))

    def send(self, data: bytes) -> bool:
        with self._lock:  # a stop from the job loop and a signal from its signal handler may cross
            try:
                self.channel.sendall(data)
                return True
            except (OSError, EOFError, Exception):  # noqa: BLE001 - a dead channel: its stream ends, the job sees it
                return False

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """End the agent (EOF on its stdin: it ends its zygote and exits), then the connection."""
        try:
            self.channel.shutdown_write()
        except (OSError, EOFError, Exception):  # noqa: BLE001 - already gone
            pass
        deadline = time.monotonic() + wait
        while not self.channel.exit_status_ready() and self.usable_transport() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.conn.close()

    def usable_transport(self) -> bool:
        transport = self.channel.get_transport()
        return transport is not None and transport.is_active()

    def events(self) -> Iterator[str]:
        return self._events

    def _relay_err(self) -> None:
        for line in self.channel.makefile_stderr("rb"):
            if line.rstrip(b"\n") == wire.ATTEMPT_END.encode():
                self.err_ended.set()
            else:
                common.write_err(line if line.endswith(b"\n") else line + b"\n")
        self.err_ended.set()


class Attempt:
    """One attempt on a live agent (an ``AgentHandle``, ``job/protocols.py``): its stream ends at the attempt's end
    marker, not at the channel's end."""

    def __init__(self, agent: LiveAgent, node_rank: int) -> None:
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

    def signal(self, signum: int) -> None:
        if not self._stopped:
            self.agent.send(wire.control_signal(signum))

    def kill(self) -> None:
        self.agent.dead = True
        self.agent.conn.close()  # EOF on the agent's stdin: it tears its node down and ends

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        channel = self.agent.channel
        while True:
            if self.ended and self.code is not None:
                return self.code
            if channel.exit_status_ready():
                status = channel.recv_exit_status()
                return START_FAILED if status == -1 else status
            if channel.closed or not self.agent.usable_transport():
                return START_FAILED
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.02)


class LiveAgents:
    """The job's live agents, by host."""

    def __init__(self) -> None:
        self.by_host: dict[str, LiveAgent] = {}

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
            agent.conn.close()

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
