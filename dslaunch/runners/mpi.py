"""MPI runners: ``--launcher openmpi`` and ``--launcher mpich``.

``mpirun``/``mpiexec`` starts one node agent per host (``--node-rank mpi``:
each agent's MPI rank is its node rank) from a per-job hostfile with one slot
per node; the agents spawn the ranks as on every other runner. The plan goes
in the environment (``DSLAUNCH_PLAN_B64``, exported by name, so no secret shows
in any argv). One handle wraps the whole ``mpirun``: the agents' event lines
come through its stdout, so exit codes are the ranks' own, never MPI's.

mpirun carries nothing from the launcher to one agent, so each agent dials back
to the launcher (``remote/agent_links.py``, the port and a secret of the job's
exported as ``DSLAUNCH_MPI_DIAL``): a requested stop's step, agreed here from
every node's proposal, goes to every agent on its connection, MACed as every line
there (``channel/loop_link.LoopLink``, every agent's on one thread; docs/stopping.md).
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.agent import mpi_env
from dslaunch.agent.dialback_client import dialback_text
from dslaunch.errors import DslaunchError
from dslaunch.job.loop import supervise_and_report
from dslaunch.job.protocols import AgentHandle, NodeAnswers, Runner
from dslaunch.job.result import START_FAILED, JobResult, stopped
from dslaunch.oslib import prctl
from dslaunch.output.lanes import ErrLane
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners.remote.agent_links import AgentLinks
from dslaunch.runners.remote.base import relay_lines

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer

HOSTFILE_TOKEN = "{hostfile}"  # replaced by the per-job hostfile's path
SSH_TOKEN = "{ssh}"  # replaced by the per-job ssh wrapper's path (MPICH)


@dataclass(frozen=True)
class Flavour:
    name: str
    programs: tuple[str, ...]  # tried in order on PATH
    install_hint: str


OPENMPI = Flavour("openmpi", ("mpirun.openmpi", "mpirun"), "apt-get install openmpi-bin")
MPICH = Flavour("mpich", ("mpiexec.hydra", "mpiexec.mpich", "mpirun.mpich"), "apt-get install mpich")


class MpiError(DslaunchError):
    """A plan MPI cannot run (exit 2, like any user error)."""


def _check_hosts(plan: LaunchPlan) -> None:
    users = [n.host for n in plan.nodes if "@" in n.host]
    if users:
        raise MpiError(f"MPI hostfiles have no user@host form ({users[0]!r}): put the user in ~/.ssh/config instead")


def hostfile_text(plan: LaunchPlan, flavour: Flavour) -> str:
    """One slot per node, in node-rank order, so MPI rank i lands on node i."""
    _check_hosts(plan)
    line = "{host} slots=1\n" if flavour is OPENMPI else "{host}:1\n"
    return "".join(line.format(host=n.host) for n in plan.nodes)


def agent_command(python: str) -> list[str]:
    return [python, "-m", "dslaunch.agent", "--node-rank", "mpi", "--no-control"]


def _exports(plan: LaunchPlan) -> list[str]:
    """Variables the agents need from the launcher's environment, by name."""
    names = [wire.PLAN_VAR, mpi_env.DIAL_VAR, mpi_env.DIAL_ADDR_VAR]
    names += [n for n in ("PYTHONPATH", "VIRTUAL_ENV") if n in os.environ]
    return names


def _ssh_args(remote: RemoteSettings) -> str:
    """The remote settings as Open MPI's ssh arguments (it splits them on spaces)."""
    parts = []
    if remote.ssh_config:
        parts.append(f"-F {remote.ssh_config}")
    if remote.ssh_port:
        parts.append(f"-p {remote.ssh_port}")
    return " ".join(parts)


def ssh_wrapper_text(plan: LaunchPlan) -> str | None:
    """Hydra takes no ssh arguments, only an ssh program: a per-job wrapper adds them."""
    remote = plan.remote
    args = ["ssh"]
    if remote.ssh_config:
        args += ["-F", remote.ssh_config]
    if remote.ssh_port:
        args += ["-p", str(remote.ssh_port)]
    return None if len(args) == 1 else f'#!/bin/sh\nexec {shlex.join(args)} "$@"\n'


def mpi_argv(
    plan: LaunchPlan,
    flavour: Flavour,
    program: str,
    hostfile: str,
    *,
    python: str = sys.executable,
    ssh: str | None = None,
) -> list[str]:
    """The full mpirun/mpiexec command line (pure, apart from the exported names)."""
    nodes = str(len(plan.nodes))
    extra = list(plan.launcher_args)
    exports = _exports(plan)
    if flavour is OPENMPI:
        argv = [program, "-n", nodes, "--hostfile", hostfile, "--map-by", "slot", "--bind-to", "none"]
        rsh = _ssh_args(plan.remote)
        if rsh:
            argv += ["--mca", "plm_rsh_args", rsh]
        for name in exports:
            argv += ["-x", name]
        if plan.cwd:
            argv += ["--wdir", plan.cwd]
    else:
        argv = [program, "-n", nodes, "-ppn", "1", "-f", hostfile, "-genvlist", ",".join(exports)]
        if ssh:
            argv += ["-launcher", "ssh", "-launcher-exec", ssh]
        if plan.cwd:
            argv += ["-wdir", plan.cwd]
    return [*argv, *extra, *agent_command(python)]


def find_program(flavour: Flavour) -> str:
    for name in flavour.programs:
        path = shutil.which(name)
        if path:
            return path
    raise MpiError(
        f"--launcher {flavour.name} needs one of {', '.join(flavour.programs)} on PATH ({flavour.install_hint})"
    )


def dial_address(master_addr: str) -> str:
    """This machine's address as the agents can reach it: the one it would reach node 0 from (no packet sent)."""
    try:
        family, _kind, _proto, _name, address = socket.getaddrinfo(master_addr, 9, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(address)
            return str(probe.getsockname()[0])
    except OSError:
        return socket.getfqdn()


def mpi_env_for(plan: LaunchPlan, base: dict[str, str], dial: str = "") -> dict[str, str]:
    """``dial``: the agents' dial-back line (``dialback_text``); the address they dial is ``$DSLAUNCH_DIAL_ADDR``
    where the user set it, else :func:`dial_address`."""
    env = dict(base)
    env[wire.PLAN_VAR] = wire.plan_to_b64(plan)
    env[mpi_env.DIAL_VAR] = dial
    env[mpi_env.DIAL_ADDR_VAR] = base.get(mpi_env.DIAL_ADDR_VAR) or dial_address(plan.master_addr)
    if os.geteuid() == 0:  # Open MPI refuses root unless told twice
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return env


def _with_port(plan: LaunchPlan) -> LaunchPlan:
    """Resolve ``--master-port 0``: only possible when the master is this machine."""
    if plan.master_port != 0:
        return plan
    if plan.master_addr not in _LOOPBACK:
        raise MpiError(
            f"--master-port 0 needs the master on this machine, not {plan.master_addr!r}: give a fixed --master-port"
        )
    from dslaunch.runners.forked import port_on_this_machine

    return plan.with_port(port_on_this_machine(plan.master_addr))


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _preexec() -> None:
    os.setsid()  # a terminal's Ctrl-C reaches dslaunch only; it stops mpirun in order
    prctl.set_parent_death_signal(signal.SIGTERM)


STDERR_WAIT = 2.0  # once mpirun's stdout ended, for the rest of its stderr
ANSWER_WAIT = 10.0  # an agent that has not dialled back yet when the stop step is decided gets it when it does


class AgentLines:
    """Control lines to every agent, on the connection it dialled back on (mpirun carries nothing to one agent)."""

    def __init__(self, listener: AgentLinks, nodes: int) -> None:
        self.listener, self.nodes = listener, nodes

    def all_connected(self) -> bool:
        return all(self.listener.joined(mpi_env.dial_name(n)) for n in range(self.nodes))

    def send(self, data: bytes) -> None:
        """To every agent; one that has not dialled back yet gets it when it does, within ``ANSWER_WAIT``."""
        waiting = [n for n in range(self.nodes) if not self.listener.send(mpi_env.dial_name(n), data)]
        if waiting:
            threading.Thread(target=self._late, args=(waiting, data), name="agent lines", daemon=True).start()

    def _late(self, waiting: list[int], data: bytes) -> None:
        end = time.monotonic() + ANSWER_WAIT
        while waiting and time.monotonic() < end:
            time.sleep(0.05)
            waiting = [n for n in waiting if not self.listener.send(mpi_env.dial_name(n), data)]


class MpiJob(AgentHandle):
    """The ``mpirun`` process, as one agent handle for all nodes."""

    def __init__(self, plan: LaunchPlan, argv: list[str], env: dict[str, str], lines: AgentLines, err: ErrLane) -> None:
        """``err``: our stderr, where mpirun's goes (its ranks' stderr with it): the launcher is the one writer of
        its terminal, so the status line can stay below everything (output/terminal.py)."""
        self.node_rank = 0
        self.nodes = len(plan.nodes)
        self._lines = lines
        self.host = f"{argv[0].rsplit('/', 1)[-1]} ({len(plan.nodes)} node(s))"
        prctl.load()  # before the fork: the child only makes the call
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            cwd=plan.cwd or None, preexec_fn=_preexec,
        )  # fmt: skip
        assert self.proc.stderr is not None
        self._stderr = threading.Thread(
            target=relay_lines, args=(err, self.proc.stderr), name="mpirun stderr", daemon=True
        )
        self._stderr.start()
        self._stopped = False
        self._asked = False  # a requested stop went to the agents
        self._dialled = False  # ... on their dial-back connections

    @property
    def node_ranks(self) -> tuple[int, ...]:
        """Every node's: each agent's events come through mpirun."""
        return tuple(range(self.nodes))

    def lines(self) -> Iterator[str]:
        """mpirun's stdout; the agents' ``done`` events become one, sent only if every node reported."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        done: dict[int, int] = {}
        for text in wire.split_events(iter(lambda: os.read(fd, 1 << 16), b"")):
            event = wire.decode(text)
            if isinstance(event, wire.Done):
                done[event.node_rank] = event.code
                continue
            yield text
        self._stderr.join(STDERR_WAIT)  # what mpirun said before it ended comes before the job's end
        if len(done) == self.nodes:  # else supervise() sees a lost node and names mpirun's status
            code = next((c for _, c in sorted(done.items()) if c), 0)
            yield wire.encode(wire.Done(node_rank=0, code=code))

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.signal(signal.SIGTERM)  # mpirun forwards it to every agent, which tears its node down

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        """On each agent's dial-back connection: a SIGTERM to mpirun would reach every agent too, but Open MPI
        SIGKILLs its processes a second later, whatever the grace. Where an agent has not dialled back, SIGTERM to
        mpirun, which forwards it to every agent: a requested stop there; a second ends the grace."""
        if self._stopped or not (now or not self._asked):
            return
        if self._dialled or self._lines.all_connected():
            self._asked = self._dialled = True
            self._lines.send(wire.control_request_stop(signum, now))
            return
        self._asked = True
        self.signal(signal.SIGTERM)

    def stop_at(self, step: int) -> None:
        """The job's step, to each agent on its dial-back connection (mpirun carries nothing to one agent)."""
        self._lines.send(wire.control_stop_at(step))

    def signal(self, signum: int) -> None:
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        # agents have a parent-death signal; remote ones lose their orted/ssh and go too
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float | None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


class _MpiRunner(Runner):
    flavour: Flavour
    name: str

    def describe(self, plan: LaunchPlan) -> list[str]:
        try:
            program = find_program(self.flavour)
        except MpiError:
            program = self.flavour.programs[-1]
        hostfile = hostfile_text(plan, self.flavour).strip().replace("\n", ", ")
        ssh = SSH_TOKEN if self.flavour is MPICH and ssh_wrapper_text(plan) else None
        argv = mpi_argv(plan, self.flavour, program, HOSTFILE_TOKEN, ssh=ssh)
        return [shlex.join(argv) + f"  # {HOSTFILE_TOKEN}: {hostfile}; plan in ${wire.PLAN_VAR}"]

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        """Here, for each node: mpirun gives no command to one node."""
        from dslaunch.runners.forked import run_here

        return run_here(plan, command)

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        try:
            program = find_program(self.flavour)
            text = hostfile_text(plan, self.flavour)
            plan = _with_port(plan)
        except MpiError as exc:
            print(f"dslaunch: {exc}", file=sys.stderr)
            return stopped(2, str(exc))
        with tempfile.TemporaryDirectory(prefix=f"dslaunch-{plan.run_id}-mpi-") as tmp:
            hostfile = os.path.join(tmp, "hostfile")
            with open(hostfile, "w", encoding="utf-8") as f:
                f.write(text)
            ssh = None
            wrapper = ssh_wrapper_text(plan) if self.flavour is MPICH else None
            if wrapper:
                ssh = os.path.join(tmp, "ssh")
                with open(ssh, "w", encoding="utf-8") as f:
                    f.write(wrapper)
                os.chmod(ssh, 0o700)
            argv = mpi_argv(plan, self.flavour, program, hostfile, ssh=ssh)
            secret = secrets.token_bytes(32)
            listener = AgentLinks(plan.run_id, secret)
            err = ErrLane()
            try:
                env = mpi_env_for(plan, dict(os.environ), dialback_text(listener.port, secret, "mpi"))
                job = MpiJob(plan, argv, env, AgentLines(listener, len(plan.nodes)), err)
            except OSError as exc:
                listener.close()
                print(f"dslaunch: cannot start {program}: {exc}", file=sys.stderr)
                return JobResult(START_FAILED, f"cannot start {program}: {exc}")
            try:
                return supervise_and_report(plan, [job], err, observer)
            finally:
                listener.close()  # after mpirun ended: its agents are gone


class OpenMpiRunner(_MpiRunner):
    flavour = OPENMPI
    name = "openmpi"


class MpichRunner(_MpiRunner):
    flavour = MPICH
    name = "mpich"


__all__ = ["MpichRunner", "OpenMpiRunner", "hostfile_text", "mpi_argv"]
