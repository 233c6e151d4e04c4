"""Job agents under pdsh (``--max-restarts`` > 0): started once per host by one pdsh, each dials back to the launcher
(agent/dialback_client.py), and that connection carries every attempt, stop, signal and stack request, and the job's
end, with no session per message. Their output still comes through pdsh (demux.py).

The launcher listens on a port of its own (remote/agent_links.py); each host gets a staged 0600 file with that
port, the job's dial-back secret and its name (``agent/dialback_client.dialback_text``), and its agent proves it
holds the secret (``channel/``: its hello first, the challenge and its answer, the launcher's welcome) before it is
trusted; every line after that is MACed both ways (``channel/loop_link.LoopLink``, every agent's on the listener's
one thread). A link that ends (the agent died), goes silent (``channel/link.SILENT``) or fails a MAC ends that host's
stream at once, from that thread (no thread per host): the attempt names the node lost.
Hosts that need an agent later (a lost node, spares) get a pdsh of their own.
"""

from __future__ import annotations

import os
import queue
import secrets
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from dslaunch.agent import dialback_client
from dslaunch.job.result import START_FAILED
from dslaunch.output.lanes import ErrLane
from dslaunch.plan import LaunchPlan
from dslaunch.runners.pdsh.demux import PdshDemux
from dslaunch.runners.pdsh.invocation import pdsh_label, start_pdsh
from dslaunch.runners.remote import stage
from dslaunch.runners.remote.agent_command import agent_command
from dslaunch.runners.remote.agent_links import AgentLink, AgentLinks
from dslaunch.runners.remote.job_agents import CLOSE_WAIT

JOIN_GRACE = 30.0  # beyond --ssh-connect-timeout: a cold interpreter on a loaded host, then the dial-back


class PdshGroup:
    """One pdsh that started the agents of some hosts, and its output split by host."""

    def __init__(self, proc: subprocess.Popen[bytes], hosts: list[str], err: ErrLane) -> None:
        self.proc = proc
        self.label = {h: pdsh_label(h) for h in hosts}
        self.demux = PdshDemux(proc, list(self.label.values()), err, for_job=True)

    def end(self, wait: float) -> None:
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:  # its ssh clients did not end
            self.proc.kill()
            self.proc.wait()


class DialBackAgent:
    """A pdsh-started agent that lives for the job (a ``JobAgent``): the link it dialled back on, its output."""

    def __init__(self, host: str, link: AgentLink, group: PdshGroup) -> None:
        self.host = host
        self.link = link
        self.group = group
        self.label = group.label[host]
        self.err_ended = group.demux.err_ended[self.label]
        self.dead = False
        self._closing = False
        self._link_up = True
        self._events = self._lines()
        link.when_ended(self._link_ended)

    def _lines(self) -> Iterator[str]:
        queue = self.group.demux.queues[self.label]
        while (line := queue.get()) is not None:
            yield line

    def _link_ended(self) -> None:
        """The agent sends nothing but heartbeats (remote/agent_links.py reads them): its link's end (the agent's,
        its silence, a line that fails its MAC) is all there is. On the links' loop thread: ``close_host`` takes
        the demux's lock for a moment and puts the stream's end, never waiting."""
        self._link_up = False
        if not self._closing:
            self.group.demux.close_host(self.label, START_FAILED)

    def events(self) -> Iterator[str]:
        return self._events

    def send(self, data: bytes) -> bool:
        return self.link.send_raw(data)

    def usable(self) -> bool:
        return not self.dead and self.status() is None

    def status(self) -> int | None:
        demux = self.group.demux
        if self.label in demux.closed:
            return demux.status.get(self.label, START_FAILED)
        return None if self._link_up else START_FAILED

    def abort(self) -> None:
        self.dead = True
        self.group.demux.stopped.add(self.label)
        self._end_link()
        self._signal_client(signal.SIGTERM)

    def close(self, wait: float = CLOSE_WAIT) -> None:
        self.group.demux.asked_to_stop.add(self.label)
        self._end_link()  # the link's end: the agent ends its zygote and exits
        deadline = time.monotonic() + wait
        while self.label not in self.group.demux.closed and time.monotonic() < deadline:
            time.sleep(0.02)
        if self.label not in self.group.demux.closed:
            self._signal_client(signal.SIGTERM)

    def _end_link(self) -> None:
        self._closing = True
        self.link.close()

    def _signal_client(self, signum: int) -> None:
        pid = self.group.demux.ssh_client(self.host.rpartition("@")[2])
        if pid is not None:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass


Stage = Callable[[str, Sequence[tuple[str, int | str, bytes]]], dict[str, str]]  # stage.stage_files, bound
PdshArgv = Callable[[list[str], str], list[str]]  # (hosts, command with '%' escaped) -> pdsh's argv


def dialback_agent_command(plan: LaunchPlan, group: str, hosts: list[str]) -> str:
    """The command pdsh runs on each of ``hosts`` (its ``%`` escaped for pdsh): an agent for the job that dials back
    as the file staged for it says (``{run_id}.{group}-{index}.plan``), its host's name as pdsh gives it (%h)."""
    token = f"DSLN{secrets.token_hex(8)}"  # stands in for pdsh's %n and %h while '%' is escaped
    command = agent_command(
        plan,
        0,
        venv_script=plan.remote.venv_script,
        for_job=True,
        host=token + "H",
        dial_file=stage.plan_path(plan.run_id, f"{group}-{token}"),
    )
    command = command.replace("%", "%%")
    if len(hosts) == 1:  # some pdsh builds leave %n alone for one host (DeepSpeed #1523): the values themselves
        command = command.replace(token + "H", shlex.quote(hosts[0]).replace("%", "%%")).replace(token, "0")
    return command.replace(token + "H", "%h").replace(token, "%n")


class _Starter:
    """One thread for the job that starts every pdsh: pdsh's parent-death signal follows the thread that forked it,
    and the spares' pdsh is asked for from a thread that ends at once."""

    def __init__(self) -> None:
        self._asked: queue.SimpleQueue[tuple[list[str], dict[str, str], queue.SimpleQueue[object]] | None]
        self._asked = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="pdsh-starter", daemon=True).start()

    def start(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        answer: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._asked.put((argv, env, answer))
        got = answer.get()
        if isinstance(got, OSError):
            raise got
        assert isinstance(got, subprocess.Popen)  # what _serve puts
        return got

    def _serve(self) -> None:
        while (asked := self._asked.get()) is not None:
            argv, env, answer = asked
            try:
                answer.put(start_pdsh(argv, env))
            except OSError as exc:
                answer.put(exc)

    def close(self) -> None:
        self._asked.put(None)


class DialBack:
    """Starts the job's agents with pdsh, host groups at a time, and takes their connections as they dial back."""

    def __init__(self, run_id: str, stage_files: Stage, pdsh_argv: PdshArgv, env: dict[str, str], err: ErrLane) -> None:
        self.err = err
        self.secret = secrets.token_bytes(32)
        self.listener = AgentLinks(run_id, self.secret)
        self.stage_files = stage_files  # (run_id, files) -> {host: why} for the hosts it could not stage on
        self.pdsh_argv = pdsh_argv
        self.env = env
        self.groups: list[PdshGroup] = []
        self._starter = _Starter()
        self._count = 0
        self._lock = threading.Lock()

    def start(self, plan: LaunchPlan, hosts: list[str]) -> tuple[dict[str, DialBackAgent], dict[str, str]]:
        """An agent on each of ``hosts``: the ones that dialled back, and why each other one did not."""
        if not hosts:
            return {}, {}
        failures: dict[str, str] = {}
        while True:  # the files are named by pdsh's index of the host (%n): staged again once one host fails
            with self._lock:
                self._count += 1
                group = f"d{self._count}"
            port = self.listener.port
            files = [
                (h, f"{group}-{i}", dialback_client.dialback_text(port, self.secret, h).encode())
                for i, h in enumerate(hosts)
            ]
            failed = self.stage_files(plan.run_id, files)
            failures.update(failed)
            hosts = [h for h in hosts if h not in failed]
            if not hosts:
                return {}, failures
            if not failed:
                break
        command = dialback_agent_command(plan, group, hosts)
        try:
            proc = self._starter.start(self.pdsh_argv(hosts, command), self.env)
        except OSError as exc:
            return {}, {**failures, **{h: f"cannot run pdsh: {exc}" for h in hosts}}
        pdsh = PdshGroup(proc, hosts, self.err)
        self.groups.append(pdsh)
        deadline = time.monotonic() + plan.remote.connect_timeout + JOIN_GRACE
        links = self.listener.take(hosts, deadline, lambda h: pdsh.label[h] in pdsh.demux.closed)
        for host in hosts:
            if host not in links:
                failures[host] = f"its agent did not dial back to this launcher (port {self.listener.port})"
                pdsh.demux.stopped.add(pdsh.label[host])
        return {h: DialBackAgent(h, link, pdsh) for h, link in links.items()}, failures

    def close(self) -> None:
        self.listener.close()
        self._starter.close()
        for group in self.groups:
            group.end(CLOSE_WAIT)
