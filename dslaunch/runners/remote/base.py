"""What the ssh and pdsh runners share, written once over one primitive: run a command on a host.

- ``--master-port 0``: ask node 0 for a free port before any agent starts;
- a lost node (agent gone without reporting): kill what is left of the job there by run id;
- a job that cannot start: every failing host named, exit ``START_FAILED`` (255, as ssh);
- the remote agents' stderr relayed to ours, and the keepalive timing that finds a silent node.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from dslaunch.job.protocols import Runner
from dslaunch.job.result import START_FAILED, JobResult
from dslaunch.limits import ascii_int
from dslaunch.output.lanes import ErrLane
from dslaunch.output.sink import STALL
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners.remote.agent_command import reap_command

KEEPALIVE_COUNT = 3  # unanswered keepalives before a node counts as lost (a network partition)


def keepalive_interval(settings: RemoteSettings) -> int:
    """Seconds between keepalives: a silent node is declared lost after about --ssh-connect-timeout."""
    return max(1, round(settings.connect_timeout / KEEPALIVE_COUNT))


def relay_lines(err: ErrLane, lines: Iterable[bytes]) -> None:
    """Copy a remote stderr stream to ours (``err``), one whole line at a time."""
    for line in lines:
        err.write(line if line.endswith(b"\n") else line + b"\n")


def port_probe_command(python: str) -> str:
    """Pick node 0's master port there as the local runner does here (oslib/ports.py, sent as its source: a host's
    python need not import dslaunch before its venv script ran)."""
    from dslaunch.oslib import ports

    with open(ports.__file__, encoding="utf-8") as f:
        code = f.read() + "\nprint(listen_port())\n"
    return shlex.join([python, "-c", code])


def parse_port(output: str) -> int | None:
    text = output.strip().splitlines()[-1:] if output.strip() else []
    port = ascii_int(text[0]) if text else None
    return port if port is not None and 0 < port < 65536 else None


ALL_HOSTS = "(all)"  # a start failure that is no host's fault (pdsh cannot run, say)


def report_start_failures(err: ErrLane, failures: dict[str, str]) -> JobResult:
    for host, why in failures.items():
        err.write(f"dslaunch: cannot start the node agent on {host}: {why}\n".encode())
    err.write(b"dslaunch: nothing was started (or what was started has been stopped)\n")
    err.flush(STALL)
    blamed = tuple((host, why) for host, why in failures.items() if host != ALL_HOSTS)
    return JobResult(START_FAILED, f"cannot start the node agent on {', '.join(failures)}", blamed=blamed)


class RemoteRunner(Runner):
    """Subclasses give :meth:`exec_on`; port picking and reaping come from here. ``err``: our stderr for the
    remote agents' stderr and this runner's words, owned here and passed down to whatever writes to it."""

    def __init__(self) -> None:
        self.err = ErrLane()

    def exec_on(self, host: str, command: str, timeout: float) -> tuple[int, str, str]:
        """Run a shell command on ``host``: (status, stdout, stderr); raise ``OSError`` if it cannot run."""
        raise NotImplementedError

    def address_of(self, plan: LaunchPlan, host: str) -> str:
        """What ``host`` resolves to through the ssh config (its HostName), as the ranks reach it."""
        from dslaunch.runners.remote.sshconfig import resolve_address

        return resolve_address(host, plan.remote.ssh_config)

    def with_free_port(self, plan: LaunchPlan, settings: RemoteSettings) -> tuple[LaunchPlan, str | None]:
        """The plan with node 0's free port when it asks for port 0; else the plan and why it failed."""
        if plan.master_port != 0:
            return plan, None
        try:
            status, out, err = self.exec_on(
                plan.nodes[0].host, port_probe_command(plan.program.python), settings.connect_timeout + 20
            )
        except OSError as exc:
            return plan, f"cannot pick a free master port there: {exc}"
        port = parse_port(out)
        if status != 0 or port is None:
            return plan, f"cannot pick a free master port there (status {status}): {err.strip()}"
        return plan.with_port(port), None

    def reap(self, plan: LaunchPlan, settings: RemoteSettings, hosts: Sequence[str]) -> None:
        """Kill, by run id and host name, whatever of the job is left on ``hosts`` (in parallel)."""
        if not hosts:
            return

        def one(host: str) -> None:
            command = reap_command(plan, settings.venv_script, host=host)
            try:
                self.exec_on(host, command, settings.connect_timeout + 20)
            except Exception as exc:  # noqa: BLE001 - the host may be gone for good
                self.err.write(f"dslaunch: could not clean up {host}: {exc}\n".encode())

        with ThreadPoolExecutor(max_workers=max(1, min(settings.fanout, len(hosts)))) as pool:
            list(pool.map(one, hosts))
