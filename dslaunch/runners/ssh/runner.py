"""ssh runner (paramiko): one connection and one node agent per host, opened in parallel.

The plan is the first line of the agent's stdin and the rest of stdin is its
control channel, so nothing relies on sshd's AcceptEnv, and a dropped
connection (or a launcher killed with SIGKILL) is EOF on the agent's stdin,
which tears that node down. With ``--max-restarts`` the agents are job agents
instead, each attempt a line on the same stdin (channel_agent.py), and spare hosts get
theirs at the job's start (runners/remote/spares.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

from dslaunch import wire
from dslaunch.job.loop import supervise_and_report
from dslaunch.job.protocols import AgentHandle, NodeAnswers
from dslaunch.job.result import START_FAILED, JobResult
from dslaunch.output.lanes import ErrLane
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners.remote import job_agents, rlimits
from dslaunch.runners.remote.agent_command import agent_command
from dslaunch.runners.remote.base import (
    KEEPALIVE_COUNT,
    RemoteRunner,
    keepalive_interval,
    relay_lines,
    report_start_failures,
)
from dslaunch.runners.remote.job_agents import Attempt, JobAgent, JobAgents
from dslaunch.runners.remote.spares import Spares, run_each
from dslaunch.runners.ssh.channel_agent import SshJobAgent
from dslaunch.runners.ssh.connect import RECV, connect_all, connect_hosts, run_on, run_on_each

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer

HEARTBEAT_ROOM = 1024  # bytes the channel's window must have left for a heartbeat, so sending one never waits


class Keepalive:
    """One thread for every connection of a job: each is pinged every ``every / 2`` seconds, and one whose peer has
    answered nothing for KEEPALIVE_COUNT intervals (a network partition, a dead host) is dropped, which ends its
    stream: the launcher names that node lost and stops the others. A ping cannot block this thread: a
    connection's send buffer holds many intervals of pings, and none is sent during a key exchange."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._watched: list[tuple[Any, Any, Callable[[], None]]] = []  # (transport, its connection, its heartbeat)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dslaunch-keepalive", daemon=True)

    def watch(self, conn: Any, beat: Callable[[], None]) -> None:
        """Ping ``conn`` and call ``beat`` (a heartbeat to its agent, wire.HEARTBEAT) every ``every / 2`` s."""
        transport = conn.client.get_transport()
        transport.replied_at = time.monotonic()
        self._watched.append((transport, conn, beat))
        if not self._thread.is_alive():
            self._thread.start()

    def close(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(self.every / 2):
            self._watched = [w for w in self._watched if w[0].is_active()]
            for transport, conn, beat in list(self._watched):
                if time.monotonic() - transport.replied_at > self.every * (KEEPALIVE_COUNT + 1):
                    conn.close()
                    continue
                beat()
                if transport.clear_to_send.is_set():
                    try:
                        transport.ping()
                    except (OSError, EOFError, Exception):  # noqa: BLE001 - a closing transport: dropped next round
                        pass


def heartbeat(channel: Any) -> None:
    """A heartbeat on an agent's control channel, unless it could block the keepalive thread: an agent that reads
    nothing (its window full) is not sent one, and if it stays silent to pings the connection is dropped anyway."""
    if channel.closed or channel.out_window_size < HEARTBEAT_ROOM:
        return
    try:
        channel.sendall(wire.control_heartbeat())
    except (OSError, EOFError, Exception):  # noqa: BLE001 - a closing channel: its stream ends, the job sees it
        pass


class SshAgent(AgentHandle):
    def __init__(
        self,
        node_rank: int,
        host: str,
        conn: Any,
        command: str,
        *,
        plan_b64: str,
        keepalive: Keepalive,
        err: ErrLane,
    ) -> None:
        self.node_rank = node_rank
        self.host = host
        self.conn = conn
        transport = conn.client.get_transport()
        self.channel = transport.open_session()
        self.channel.exec_command(command)
        self.channel.sendall(plan_b64.encode() + b"\n")
        self._stopped = False
        self.reported = False  # the agent sent its "done" event
        self._relay = threading.Thread(target=relay_lines, args=(err, self.channel.makefile_stderr("rb")), daemon=True)
        self._relay.start()
        keepalive.watch(conn, partial(heartbeat, self.channel))

    def lines(self) -> Iterator[str]:
        for text in wire.split_events(iter(lambda: self.channel.recv(RECV), b"")):
            if text.startswith(wire.MARKER) and isinstance(wire.decode(text), wire.Done):
                self.reported = True
            yield text
        # stderr is read by a thread of its own: its last lines must be in before the attempt's console closes
        self._relay.join(job_agents.END_WAIT)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.channel.sendall(wire.control_stop())
            self.channel.shutdown_write()
        except (OSError, EOFError, Exception):  # noqa: BLE001 - a dead channel is already stopped
            pass

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        self._send(wire.control_request_stop(signum, now))

    def stop_at(self, step: int) -> None:
        self._send(wire.control_stop_at(step))

    def signal(self, signum: int) -> None:
        # sshd refuses the "signal" channel request for root sessions: ask the agent on its control channel.
        self._send(wire.control_signal(signum))

    def _send(self, line: bytes) -> None:
        if self._stopped:
            return
        try:
            self.channel.sendall(line)
        except (OSError, EOFError, Exception):  # noqa: BLE001 - a dead channel is already stopped
            pass

    def kill(self) -> None:
        # Dropping the connection is EOF on the agent's stdin: the node tears itself down.
        self.conn.close()

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.channel.exit_status_ready():
            transport = self.channel.get_transport()
            if self.channel.closed or transport is None or not transport.is_active():
                return START_FAILED
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        status = self.channel.recv_exit_status()
        return START_FAILED if status == -1 else status


class SshRunner(RemoteRunner):
    name = "ssh"

    def __init__(self) -> None:
        super().__init__()
        self._settings = RemoteSettings()
        self._conns: dict[str, Any] = {}
        self._agents: JobAgents | None = None  # with restarts: one agent per host for the job (channel_agent.py)
        self._spares: Spares | None = None  # ... and one on each spare host, standing by (spares.py)
        self._keepalive: Keepalive | None = None

    def describe(self, plan: LaunchPlan) -> list[str]:
        settings = plan.remote
        if plan.restarts.max_restarts > 0:
            return [
                f"ssh {n.host}  {agent_command(plan, 0, venv_script=settings.venv_script, for_job=True, host=n.host)}"
                f"  < each attempt on stdin (node rank {n.node_rank})"
                for n in plan.nodes
            ]
        return [
            f"ssh {n.host}  {agent_command(plan, n.node_rank, venv_script=settings.venv_script)}  < plan on stdin"
            for n in plan.nodes
        ]

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        return run_on_each(plan, command)

    def probe(self, plan: LaunchPlan, hosts: list[str]) -> dict[str, str]:
        """Check ``hosts`` as --preflight does (job/attempts.HostPool): with job agents, over the
        connections they have, and a spare that passed its last check less than --spare-check-interval ago is not
        checked again."""
        from dslaunch.runners.preflight import probe_hosts

        if plan.restarts.max_restarts == 0:
            return probe_hosts(plan, hosts, self.run_on_nodes)
        self._settings = plan.remote  # exec_on's, before the first attempt sets it
        if self._spares is None:
            return probe_hosts(plan, hosts, self._probe_results)
        failures, todo = self._spares.to_probe(hosts, plan.remote.spare_check)
        return {**failures, **probe_hosts(plan, todo, self._probe_results)}

    def _probe_results(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        timeout = plan.remote.connect_timeout + 20

        def one(host: str) -> tuple[int | None, str, str]:
            try:
                return self.exec_on(host, command, timeout)
            except Exception as exc:  # noqa: BLE001 - any transport error is this host's failure
                return None, "", str(exc)

        results = run_each([n.host for n in plan.nodes], one, plan.remote.fanout)
        return {node.node_rank: result for node, result in zip(plan.nodes, results)}

    def _connect(self, hosts: list[str], settings: RemoteSettings) -> tuple[dict[str, Any], dict[str, str]]:
        """A connection to each of ``hosts``: the one this job has (a probe's), else a new one."""
        kept = {}
        for host in hosts:
            conn = self._conns.get(host)
            transport = conn.client.get_transport() if conn is not None else None
            if transport is not None and transport.is_active():
                kept[host] = conn
        conns, failures = connect_hosts([h for h in hosts if h not in kept], settings)
        for host, conn in conns.items():
            if host in self._conns:
                self._conns[host].close()
            self._conns[host] = conn
        return {**kept, **conns}, failures

    def close(self) -> None:
        """The job is over: end its job agents, and their connections."""
        if self._spares is not None:
            self._spares.end_job()
        if self._keepalive is not None:
            self._keepalive.close()
        for conn in self._conns.values():
            conn.close()
        self._conns = {}

    def exec_on(self, host: str, command: str, timeout: float) -> tuple[int, str, str]:
        """Over this job's connection to ``host``, or a new one when it dropped."""
        from dslaunch.runners.ssh.paramiko_conn import ConnectError, connect

        conn = self._conns.get(host)
        transport = conn.client.get_transport() if conn is not None else None
        if conn is None or transport is None or not transport.is_active():
            s = self._settings
            try:
                conn = connect(host, s.ssh_config, s.ssh_port, s.accept_new_hosts, s.connect_timeout)
            except ConnectError as exc:
                raise OSError(str(exc)) from None
            self._conns[host] = conn
        return run_on(conn, command, timeout)

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        if plan.restarts.max_restarts > 0:
            return self._run_on_job_agents(plan, observer)
        settings = self._settings = plan.remote
        for warning in rlimits.make_room(len(plan.nodes), "ssh"):  # a socket and threads per host, for the job
            self.err.write(warning.encode())
        conns, failures = connect_all(plan, settings)
        self._conns = {plan.node(rank).host: conn for rank, conn in conns.items()}
        handles: list[SshAgent] = []
        keepalive = Keepalive(keepalive_interval(settings))
        try:
            if failures:
                return report_start_failures(self.err, failures)
            plan, why = self.with_free_port(plan, settings)
            if why:
                return report_start_failures(self.err, {plan.nodes[0].host: why})
            plan_b64 = wire.plan_to_b64(plan)
            for node in plan.nodes:
                command = agent_command(plan, node.node_rank, venv_script=settings.venv_script)
                try:
                    agent = SshAgent(
                        node.node_rank,
                        node.host,
                        conns[node.node_rank],
                        command,
                        plan_b64=plan_b64,
                        keepalive=keepalive,
                        err=self.err,
                    )
                    handles.append(agent)
                except Exception as exc:  # noqa: BLE001 - any channel error: stop what already started
                    for h in handles:
                        h.stop()
                    return report_start_failures(self.err, {node.host: f"{type(exc).__name__}: {exc}"})
            result = supervise_and_report(plan, handles, self.err, observer)
            self.reap(plan, settings, [h.host for h in handles if not h.reported])
            return result
        finally:
            keepalive.close()
            for h in handles:
                if h.wait(0) is None:
                    h.kill()
            for conn in self._conns.values():
                conn.close()
            self._conns = {}

    def _run_on_job_agents(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        """One attempt on the job agents: started on the hosts that have none, told elsewhere."""
        settings = self._settings = plan.remote
        if self._agents is None:
            for warning in rlimits.make_room(len(plan.nodes), "ssh"):
                self.err.write(warning.encode())
            self._agents, self._keepalive = JobAgents(), Keepalive(keepalive_interval(settings))
            self._spares = Spares(self._agents, self.probe, self.err)
        agents, keepalive, spares = self._agents, self._keepalive, self._spares
        assert keepalive is not None and spares is not None  # set with _agents
        spares.join()
        lacking = agents.lacking([node.host for node in plan.nodes])
        conns, failures = self._connect(lacking, settings)
        if failures:
            return report_start_failures(self.err, failures)
        plan, why = self.with_free_port(plan, settings)
        if why:
            return report_start_failures(self.err, {plan.nodes[0].host: why})

        def command(host: str) -> str:
            return agent_command(plan, 0, venv_script=settings.venv_script, for_job=True, host=host)

        def start_agents(hosts: list[str]) -> dict[str, JobAgent]:
            """Spares' agents, on their connections (a probe's, else new ones)."""
            started: dict[str, JobAgent] = {}
            for host, conn in self._connect(hosts, settings)[0].items():
                try:
                    started[host] = agent = SshJobAgent(host, conn, command(host), self.err)
                except Exception:  # noqa: BLE001 - no session there: it stays out of the spares
                    conn.close()
                    continue
                keepalive.watch(conn, partial(heartbeat, agent.channel))
            return started

        attempts: list[Attempt] = []
        try:
            for host, conn in conns.items():
                agents.by_host[host] = agent = SshJobAgent(host, conn, command(host), self.err)
                keepalive.watch(conn, partial(heartbeat, agent.channel))
            attempts = [job_agents.start(agents.by_host[node.host], plan, node.node_rank) for node in plan.nodes]
            spares.promoted([node.host for node in plan.nodes])
            if plan.elastic.candidates:
                spares.stand_by(plan, start_agents)
        except Exception as exc:  # noqa: BLE001 - any channel error: stop what already started
            for attempt in attempts:
                attempt.kill()
            agents.after(attempts)
            return report_start_failures(
                self.err, {host: f"{type(exc).__name__}: {exc}" for host in conns} or {"?": str(exc)}
            )
        result = spares.supervise(plan, attempts, observer)
        self.reap(plan, settings, [a.host for a in attempts if not a.reported])
        return result
