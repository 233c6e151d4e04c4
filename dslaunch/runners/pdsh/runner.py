"""pdsh runner: one ``pdsh -S -R ssh`` for all nodes, its output split back per host.

pdsh cannot carry stdin and its command line is public, so the plan goes ahead to
each host as a 0600 file over OpenSSH (``remote/stage.py``), and the agent reads and
deletes it; ``%n`` (pdsh's index of the host in ``-w``) gives each agent its node rank.
pdsh gives no per-host channel to an agent, so a node is stopped (or sent SIGUSR1/2) by a
second, short ssh that signals its agent by run id (``dslaunch.runners.remote.reap --agent-signal``):
the agent then stops its ranks with the full --shutdown-timeout grace and reports them, as
under ssh. Ending the node's ssh client is the fallback when that ssh fails, and what a second
Ctrl-C or the end of the grace period does. The agent still watches stdin: a launcher killed
with SIGKILL takes pdsh with it (parent-death signal), which closes every ssh client's stdin.
Beside the plan, each host's file holds a way back to this launcher: the agent keeps a connection
to it whose end (the launcher's death, its silence: a partition) stops its node.

With ``--max-restarts`` they are job agents instead (dialback.py): each dials back to the launcher, and that
connection carries every attempt, stop and signal; spare hosts get theirs at the job's start.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.agent import dialback_client
from dslaunch.job.loop import supervise_and_report
from dslaunch.job.protocols import AgentHandle, NodeAnswers
from dslaunch.job.result import JobResult
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners.pdsh.demux import PdshDemux
from dslaunch.runners.pdsh.dialback import DialBack, dialback_agent_command
from dslaunch.runners.pdsh.invocation import (
    pdsh_command,
    pdsh_env,
    pdsh_label,
    pdsh_labels,
    run_on_each,
    ssh_args,
    start_pdsh,
)
from dslaunch.runners.pdsh.ssh_mux import SshMux
from dslaunch.runners.remote import job_agents, rlimits, stage
from dslaunch.runners.remote.agent_command import agent_command, reap_command
from dslaunch.runners.remote.agent_links import AgentLinks
from dslaunch.runners.remote.base import ALL_HOSTS, RemoteRunner, report_start_failures
from dslaunch.runners.remote.job_agents import JobAgents
from dslaunch.runners.remote.spares import Spares

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer


def pdsh_argv(plan: LaunchPlan, settings: RemoteSettings) -> list[str]:
    # A single host gets its rank literally: some pdsh builds leave %n alone then (DeepSpeed #1523).
    rank = "0" if len(plan.nodes) == 1 else "%n"
    token = f"DSLRANK{uuid.uuid4().hex}"  # stands in for the rank while '%' is escaped for pdsh
    command = agent_command(
        plan, token, venv_script=settings.venv_script, plan_file=stage.plan_path(plan.run_id, token)
    )
    command = command.replace("%", "%%").replace(token, rank)
    return pdsh_command(settings, [n.host for n in plan.nodes], command, strict=True)


class PdshNode(AgentHandle):
    def __init__(
        self,
        node_rank: int,
        host: str,
        demux: PdshDemux,
        tell: Callable[[int, str, str], bool],
        send: Callable[[str, bytes], bool] = lambda _host, _data: False,
    ) -> None:
        self.node_rank = node_rank
        self.host = host
        self.key = pdsh_label(host)
        self.demux = demux
        self.tell = tell  # (node rank, host, signal name) -> whether the agent there was signalled
        self.signalled_stop: int | None = None  # a requested stop's signal, sent
        self.send = send  # (host, lines) on the connection its agent keeps to this launcher: the stop step
        self.stopping = False

    def lines(self) -> Iterator[str]:
        q = self.demux.queues[self.key]
        while (line := q.get()) is not None:
            yield line
        if self.key in self.demux.reported:  # its stderr, read apart, is all in once its end marker came
            self.demux.err_ended[self.key].wait(job_agents.END_WAIT)

    def _signal_client(self, signum: int) -> None:
        pid = self.demux.ssh_client(self.host.rpartition("@")[2])  # ssh gets the name, pdsh labels it
        if pid is not None:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        if self.stopping or self.key in self.demux.status:
            return
        self.stopping = True
        self.demux.asked_to_stop.add(self.key)
        threading.Thread(target=self._stop, daemon=True).start()

    def stop_at(self, step: int) -> None:
        """On the connection its agent keeps to this launcher: pdsh carries nothing to one agent."""
        self.send(self.host, wire.control_stop_at(step))

    def _stop(self) -> None:
        if not self.tell(self.node_rank, self.host, wire.TEARDOWN_SIGNAL.name[3:]):
            # Ending the ssh client is EOF on the remote agent's stdin: it tears its node down,
            # but the reaper may then cut the grace period short.
            self.demux.stopped.add(self.key)
            self._signal_client(signal.SIGTERM)

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        """The signal itself to the agent (a second one ends the grace there), so the node ends with its code."""
        if self.stopping or self.key in self.demux.status:
            return
        if now or self.signalled_stop is None:
            self.signalled_stop = signum
            self.signal(signum)

    def signal(self, signum: int) -> None:
        name = signal.Signals(signum).name.removeprefix("SIG")
        threading.Thread(target=self.tell, args=(self.node_rank, self.host, name), daemon=True).start()

    def kill(self) -> None:
        self.demux.stopped.add(self.key)
        self._signal_client(signal.SIGKILL)

    def wait(self, timeout: float | None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.key not in self.demux.status:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.02)
        return self.demux.status[self.key]


class PdshRunner(RemoteRunner):
    name = "pdsh"

    def __init__(self) -> None:
        super().__init__()
        self._ssh_options: list[str] = []
        self._env: dict[str, str] = {}
        self._mux: SshMux | None = None  # with restarts, the job's (kept for its probes, reaps and stagings)
        self._dial: DialBack | None = None  # ... its agents, started by pdsh, dialled back (dialback.py)
        self._agents: JobAgents | None = None
        self._spares: Spares | None = None

    def describe(self, plan: LaunchPlan) -> list[str]:
        settings = plan.remote
        pdsh_labels([n.host for n in plan.nodes])
        if plan.restarts.max_restarts > 0:
            hosts = [n.host for n in plan.nodes]
            argv = pdsh_command(settings, hosts, dialback_agent_command(plan, "d1", hosts))
            dial = stage.plan_path(plan.run_id, "d1-%n")
            return [
                f"PDSH_SSH_ARGS_APPEND={shlex.quote(' '.join(ssh_args(settings)))} {shlex.join(argv)}"
                f"  # each agent dials back to this launcher (port and secret staged over ssh to ~/{dial}, 0600); "
                "each attempt goes on that connection"
            ]
        argv = pdsh_argv(plan, settings)
        staged = f"  # plan staged first over ssh to ~/{stage.plan_path(plan.run_id, 'N')} (0600) on each host"
        return [f"PDSH_SSH_ARGS_APPEND={shlex.quote(' '.join(ssh_args(settings)))} {shlex.join(argv)}{staged}"]

    def exec_on(self, host: str, command: str, timeout: float) -> tuple[int, str, str]:
        """With OpenSSH and the options pdsh's own ssh clients get."""
        try:
            done = subprocess.run(
                stage.ssh_argv(host, self._ssh_options, command),
                capture_output=True,
                text=True,
                env=self._env,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise OSError(f"ssh did not finish within {timeout:.0f} s") from None
        return done.returncode, done.stdout, done.stderr

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        return run_on_each(plan, command)

    def probe(self, plan: LaunchPlan, hosts: list[str]) -> dict[str, str]:
        """Check ``hosts`` as --preflight does (job/attempts.HostPool); a spare found unfit stays so, and one that
        passed its check less than --spare-check-interval ago is not checked again."""
        from dslaunch.runners.preflight import probe_hosts

        spares = self._spares
        if spares is None:
            return probe_hosts(plan, hosts, self.run_on_nodes)
        failures, todo = spares.to_probe(hosts, plan.remote.spare_check)
        return {**failures, **probe_hosts(plan, todo, self.run_on_nodes)}

    def close(self) -> None:
        """The job is over: end its job agents, their pdsh runs and the shared ssh connection."""
        if self._spares is not None:
            self._spares.end_job()
        if self._dial is not None:
            self._dial.close()
        if self._mux is not None:
            self._mux.close()
        self._spares = self._agents = self._dial = self._mux = None

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        settings = plan.remote
        pdsh_labels([n.host for n in plan.nodes])  # before anything is staged
        if plan.restarts.max_restarts > 0:
            return self._run_on_job_agents(plan, observer)
        for warning in rlimits.make_room(len(plan.nodes), "pdsh"):  # pdsh inherits them: pipes, ssh clients
            self.err.write(warning.encode())
        mux = SshMux()
        try:
            try:
                env = self._env = pdsh_env(settings, dict(os.environ), mux.client_options())
            except ValueError as exc:
                return report_start_failures(self.err, {"(all)": str(exc)})
            timeout = max(1, round(settings.connect_timeout))
            appended = shlex.split(env["PDSH_SSH_ARGS_APPEND"])
            self._ssh_options = [*mux.options(), *appended, "-o", f"ConnectTimeout={timeout}"]  # first value wins
            return self._run(plan, settings, env, observer)
        finally:
            mux.close()

    def _set_up(self, plan: LaunchPlan) -> str | None:
        """What the job's attempts share: the ssh connection, pdsh's environment, the dial-back port; or why not."""
        settings = plan.remote
        for warning in rlimits.make_room(len(plan.elastic.candidates) or len(plan.nodes), "pdsh"):
            self.err.write(warning.encode())
        self._mux = mux = SshMux()
        try:
            env = self._env = pdsh_env(settings, dict(os.environ), mux.client_options())
        except ValueError as exc:
            return str(exc)
        timeout = max(1, round(settings.connect_timeout))
        appended = shlex.split(env["PDSH_SSH_ARGS_APPEND"])
        self._ssh_options = [*mux.options(), *appended, "-o", f"ConnectTimeout={timeout}"]

        def stage_files(run_id: str, files: Sequence[tuple[str, int | str, bytes]]) -> dict[str, str]:
            options, wait = self._ssh_options, settings.connect_timeout + 20
            return stage.stage_files(run_id, files, ssh_options=options, env=env, fanout=settings.fanout, timeout=wait)

        def argv(hosts: list[str], command: str) -> list[str]:
            return pdsh_command(settings, hosts, command)

        self._dial = DialBack(plan.run_id, stage_files, argv, env, self.err)
        self._agents = JobAgents()
        self._spares = Spares(self._agents, self.probe, self.err)
        return None

    def _run_on_job_agents(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        """One attempt on the job agents: started (by pdsh) on the hosts that have none."""
        settings = plan.remote
        if self._dial is None and (why := self._set_up(plan)) is not None:
            return report_start_failures(self.err, {ALL_HOSTS: why})
        dial, agents, spares = self._dial, self._agents, self._spares
        assert dial is not None and agents is not None and spares is not None  # _set_up's
        spares.join()
        plan, why = self.with_free_port(plan, settings)
        if why:
            return report_start_failures(self.err, {plan.nodes[0].host: why})
        hosts = [node.host for node in plan.nodes]
        started, failures = dial.start(plan, agents.lacking(hosts))
        agents.by_host.update(started)
        if failures:
            for host in started:
                agents.drop(host)
            self.reap(plan, settings, [*started, *failures])
            return report_start_failures(self.err, failures)
        attempts = [job_agents.start(agents.by_host[node.host], plan, node.node_rank) for node in plan.nodes]
        spares.promoted(hosts)
        if plan.elastic.candidates:
            spares.stand_by(plan, lambda spare_hosts: dict(dial.start(plan, spare_hosts)[0]))
        result = spares.supervise(plan, attempts, observer)
        self.reap(plan, settings, [a.host for a in attempts if not a.reported])
        return result

    def _run(
        self, plan: LaunchPlan, settings: RemoteSettings, env: dict[str, str], observer: Observer | None
    ) -> JobResult:
        plan, why = self.with_free_port(plan, settings)
        if why:
            return report_start_failures(self.err, {plan.nodes[0].host: why})
        # Each agent's liveness line to this launcher (agent/dialback_client.py::watch_launcher): pdsh has no stdin, so
        # without it a partition reaches a cut-off agent only through its sshd's ClientAlive settings.
        secret = secrets.token_bytes(32)
        listener = AgentLinks(plan.run_id, secret)
        try:
            after = {n.host: dialback_client.dialback_text(listener.port, secret, n.host) for n in plan.nodes}
            return self._run_staged(plan, settings, env, after, listener, observer=observer)
        finally:
            listener.close()  # after pdsh ended: its agents are gone

    def _run_staged(
        self,
        plan: LaunchPlan,
        settings: RemoteSettings,
        env: dict[str, str],
        after: dict[str, str],
        listener: AgentLinks,
        *,
        observer: Observer | None,
    ) -> JobResult:
        try:
            failed = stage.stage_plan(
                plan, self._ssh_options, env, settings.fanout, settings.connect_timeout + 20, after=after
            )
        except BaseException:  # Ctrl-C while staging: what was staged goes (a SIGKILL leaves it to the sweep)
            self.reap(plan, settings, [n.host for n in plan.nodes])
            raise
        if failed:
            self.reap(plan, settings, [n.host for n in plan.nodes if n.host not in failed])
            return report_start_failures(self.err, failed)
        try:
            proc = start_pdsh(pdsh_argv(plan, settings), env)
        except OSError as exc:
            self.reap(plan, settings, [n.host for n in plan.nodes])
            return report_start_failures(self.err, {"(all)": f"cannot run pdsh: {exc}"})
        demux = PdshDemux(proc, pdsh_labels([n.host for n in plan.nodes]), self.err)
        tell = _AgentSignals(plan, self._ssh_options, env)
        handles = [PdshNode(n.node_rank, n.host, demux, tell, listener.send) for n in plan.nodes]
        try:
            result = supervise_and_report(plan, handles, self.err, observer)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            tell.close()
            self.reap(plan, settings, [n.host for n in plan.nodes if pdsh_label(n.host) not in demux.reported])
        return result


class _AgentSignals:
    """Signals a node's agent by run id over a second, short ssh (pdsh has no channel to one agent)."""

    def __init__(self, plan: LaunchPlan, ssh_options: list[str], env: dict[str, str]) -> None:
        self.plan = plan
        self.ssh_options = ssh_options
        self.env = env
        self.started: list[subprocess.Popen[str]] = []

    def __call__(self, node_rank: int, host: str, name: str) -> bool:
        """Whether node ``node_rank``'s agent on ``host`` got signal ``name`` (TERM, QUIT, USR1, ...): by the pid
        it wrote, in shell, else by a python that finds it by run id (before it wrote one, say)."""
        settings = self.plan.remote
        by_pid = stage.signal_command(self.plan.run_id, node_rank, name)
        command = f"{by_pid} || {reap_command(self.plan, settings.venv_script, agent_signal=name)}"
        try:
            ssh = subprocess.Popen(
                stage.ssh_argv(host, self.ssh_options, command),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env=self.env,
            )
        except OSError:
            return False
        self.started.append(ssh)
        try:
            out, _ = ssh.communicate(timeout=settings.connect_timeout + 10)
        except subprocess.TimeoutExpired:
            ssh.kill()
            return False
        return ssh.returncode == 0 and (out.startswith("signalled") or ("agent(s)" in out and " 0 agent(s)" not in out))

    def close(self, grace: float = 2.0) -> None:
        """Let the signals still on their way finish (a killed client would not end its remote shell, which then
        outlives the job), for ``grace`` seconds in all; then end their clients."""
        deadline = time.monotonic() + grace
        for ssh in list(self.started):
            try:
                ssh.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                ssh.kill()
                ssh.wait()
