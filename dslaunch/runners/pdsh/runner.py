"""pdsh runner: one ``pdsh -S -R ssh`` for all nodes, its output split back per host.

pdsh cannot carry stdin and its command line is public, so the plan goes ahead to
each host as a 0600 file over OpenSSH (``remote/stage.py``), and the agent reads and
deletes it; ``%n`` (pdsh's index of the host in ``-w``) gives each agent its node rank.
pdsh gives no per-host channel to an agent, so a node is stopped (or sent SIGUSR1/2) by a
second, short ssh that signals its agent by run id (``dslaunch.remote.reap --agent-signal``):
the agent then stops its ranks with the full --shutdown-timeout grace and reports them, as
under ssh. Ending the node's ssh client is the fallback when that ssh fails, and what a second
Ctrl-C or the end of the grace period does. The agent still watches stdin: a launcher killed
with SIGKILL takes pdsh with it (parent-death signal), which closes every ssh client's stdin.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

from dslaunch.errors import DslaunchError
from dslaunch.job.loop import supervise_and_report
from dslaunch.job.result import JobResult
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.remote import rlimits, stage
from dslaunch.remote.agent_command import agent_command, reap_command
from dslaunch.remote.common import KEEPALIVE_COUNT, keepalive_interval, write_err
from dslaunch.remote.ssh_mux import SshMux
from dslaunch.remote.sshconfig import default_config_path
from dslaunch.runners.pdsh.demux import PdshDemux
from dslaunch.runners.remote_base import RemoteRunner, report_start_failures


def ssh_args(settings: RemoteSettings) -> list[str]:
    """Options for every ssh client pdsh starts, after the user's own PDSH_SSH_ARGS_APPEND."""
    every = keepalive_interval(settings)
    args = ["-o", "BatchMode=yes", "-o", f"ServerAliveInterval={every}", "-o", f"ServerAliveCountMax={KEEPALIVE_COUNT}"]
    if settings.ssh_config and settings.ssh_config != default_config_path():
        args += ["-F", settings.ssh_config]
    if settings.ssh_port:
        args += ["-p", str(settings.ssh_port)]
    if settings.accept_new_hosts:
        args += ["-o", "StrictHostKeyChecking=accept-new"]
    return args


def pdsh_argv(plan: LaunchPlan, settings: RemoteSettings) -> list[str]:
    # A single host gets its rank literally: some pdsh builds leave %n alone then (DeepSpeed #1523).
    rank = "0" if len(plan.nodes) == 1 else "%n"
    token = f"DSLRANK{uuid.uuid4().hex}"  # stands in for the rank while '%' is escaped for pdsh
    command = agent_command(
        plan, token, venv_script=settings.venv_script, plan_file=stage.plan_path(plan.run_id, token)
    )
    command = command.replace("%", "%%").replace(token, rank)
    return pdsh_command(settings, [n.host for n in plan.nodes], command, strict=True)


def pdsh_command(settings: RemoteSettings, hosts: Sequence[str], command: str, *, strict: bool = False) -> list[str]:
    """One pdsh over ssh running ``command`` (its ``%`` already escaped) on every host at once.

    ``strict`` (-S) makes pdsh exit with the largest remote status.
    """
    return [
        "pdsh",
        *(["-S"] if strict else []),
        "-R",
        "ssh",
        "-f",
        str(max(settings.fanout, len(hosts))),
        "-t",
        str(max(1, round(settings.connect_timeout))),
        "-w",
        ",".join(hosts),
        command,
    ]


def pdsh_env(settings: RemoteSettings, base: dict[str, str], mux: Sequence[str] = ()) -> dict[str, str]:
    """pdsh's environment: our ssh options (``mux``: a shared connection's) after the user's own."""
    env = dict(base)
    if any(c.isspace() for c in settings.ssh_config or ""):
        raise ValueError(f"pdsh cannot pass an ssh config path with spaces: {settings.ssh_config!r}")
    ours = [*ssh_args(settings), *mux]
    env["PDSH_SSH_ARGS_APPEND"] = " ".join(filter(None, [base.get("PDSH_SSH_ARGS_APPEND", ""), *ours]))
    env.pop("PDSH_SSH_ARGS", None)  # our own -F/-p/-o must not be replaced by a custom template
    return env


def pdsh_label(host: str) -> str:
    """The name pdsh puts before each line of ``host``: no user, and no domain unless it is an IPv4 address."""
    import ipaddress

    name = host.rpartition("@")[2]
    try:
        ipaddress.IPv4Address(name)
        return name
    except ValueError:
        return name.split(".", 1)[0]


def pdsh_labels(hosts: Sequence[str]) -> list[str]:
    """Each host's pdsh label; two hosts that pdsh would label alike cannot be told apart."""
    labels = [pdsh_label(h) for h in hosts]
    seen: dict[str, str] = {}
    for host, label in zip(hosts, labels):
        if label in seen:
            raise DslaunchError(
                f"pdsh labels the output of {seen[label]!r} and {host!r} alike ({label!r}), so it cannot tell "
                "them apart: use --launcher ssh, or host names that differ before the first '.'"
            )
        seen[label] = host
    return labels


class PdshNode:
    def __init__(self, node_rank: int, host: str, demux: PdshDemux, tell: Callable[[int, str, str], bool]) -> None:
        self.node_rank = node_rank
        self.host = host
        self.key = pdsh_label(host)
        self.demux = demux
        self.tell = tell  # (node rank, host, signal name) -> whether the agent there was signalled
        self.stopping = False

    def lines(self) -> Iterator[str]:
        q = self.demux.queues[self.key]
        while (line := q.get()) is not None:
            yield line

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

    def _stop(self) -> None:
        if not self.tell(self.node_rank, self.host, "TERM"):
            # Ending the ssh client is EOF on the remote agent's stdin: it tears its node down,
            # but the reaper may then cut the grace period short.
            self.demux.stopped.add(self.key)
            self._signal_client(signal.SIGTERM)

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
        self._ssh_options: list[str] = []
        self._env: dict[str, str] = {}

    def describe(self, plan: LaunchPlan) -> list[str]:
        settings = plan.remote
        pdsh_labels([n.host for n in plan.nodes])
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

    def run(self, plan: LaunchPlan) -> JobResult:
        settings = plan.remote
        pdsh_labels([n.host for n in plan.nodes])  # before anything is staged
        for warning in rlimits.make_room(len(plan.nodes), "pdsh"):  # pdsh inherits them: pipes, ssh clients
            write_err(warning.encode())
        mux = SshMux()
        try:
            try:
                env = self._env = pdsh_env(settings, dict(os.environ), mux.client_options())
            except ValueError as exc:
                return report_start_failures({"(all)": str(exc)})
            timeout = max(1, round(settings.connect_timeout))
            appended = shlex.split(env["PDSH_SSH_ARGS_APPEND"])
            self._ssh_options = [*mux.options(), *appended, "-o", f"ConnectTimeout={timeout}"]  # first value wins
            return self._run(plan, settings, env)
        finally:
            mux.close()

    def _run(self, plan: LaunchPlan, settings: RemoteSettings, env: dict[str, str]) -> JobResult:
        plan, why = self.with_free_port(plan, settings)
        if why:
            return report_start_failures({plan.nodes[0].host: why})
        try:
            failed = stage.stage_plan(plan, self._ssh_options, env, settings.fanout, settings.connect_timeout + 20)
        except BaseException:  # Ctrl-C while staging: what was staged goes (a SIGKILL leaves it to the sweep)
            self.reap(plan, settings, [n.host for n in plan.nodes])
            raise
        if failed:
            self.reap(plan, settings, [n.host for n in plan.nodes if n.host not in failed])
            return report_start_failures(failed)
        try:
            proc = _start_pdsh(pdsh_argv(plan, settings), env)
        except OSError as exc:
            self.reap(plan, settings, [n.host for n in plan.nodes])
            return report_start_failures({"(all)": f"cannot run pdsh: {exc}"})
        demux = PdshDemux(proc, pdsh_labels([n.host for n in plan.nodes]))
        tell = _AgentSignals(plan, self._ssh_options, env)
        handles = [PdshNode(n.node_rank, n.host, demux, tell) for n in plan.nodes]
        try:
            result = supervise_and_report(plan, handles)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            tell.close()
            self.reap(plan, settings, [n.host for n in plan.nodes if pdsh_label(n.host) not in demux.reported])
        return result


def _start_pdsh(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    prctl.load()  # before the fork: the child only makes the call
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=lambda: prctl.set_parent_death_signal(signal.SIGKILL),
    )


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
