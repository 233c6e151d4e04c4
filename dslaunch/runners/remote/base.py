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

from dslaunch.job.result import START_FAILED, JobResult
from dslaunch.limits import ascii_int
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners.remote.agent_command import reap_command

KEEPALIVE_COUNT = 3  # unanswered keepalives before a node counts as lost (a network partition)


def keepalive_interval(settings: RemoteSettings) -> int:
    """Seconds between keepalives: a silent node is declared lost after about --ssh-connect-timeout."""
    return max(1, round(settings.connect_timeout / KEEPALIVE_COUNT))


def write_err(data: bytes) -> None:
    """To our stderr, never waiting for its reader (``output/lanes.py``): :func:`flush_err` waits."""
    from dslaunch.output.lanes import ERR

    ERR.write(data)


def flush_err() -> None:
    """Until what ``write_err`` took is out, or our stderr took nothing for half a second."""
    from dslaunch.output.lanes import ERR
    from dslaunch.output.sink import STALL

    ERR.flush(STALL)


def relay_lines(lines: Iterable[bytes]) -> None:
    """Copy a remote stderr stream to ours, one whole line at a time."""
    for line in lines:
        write_err(line if line.endswith(b"\n") else line + b"\n")


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


def report_start_failures(failures: dict[str, str]) -> JobResult:
    for host, why in failures.items():
        write_err(f"dslaunch: cannot start the node agent on {host}: {why}\n".encode())
    write_err(b"dslaunch: nothing was started (or what was started has been stopped)\n")
    flush_err()
    blamed = tuple((host, why) for host, why in failures.items() if host != ALL_HOSTS)
    return JobResult(START_FAILED, f"cannot start the node agent on {', '.join(failures)}", blamed=blamed)


class RemoteRunner:
    """Subclasses give :meth:`exec_on`; port picking and reaping come from here."""

    def exec_on(self, host: str, command: str, timeout: float) -> tuple[int, str, str]:
        """Run a shell command on ``host``: (status, stdout, stderr); raise ``OSError`` if it cannot run."""
        raise NotImplementedError

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
                write_err(f"dslaunch: could not clean up {host}: {exc}\n".encode())

        with ThreadPoolExecutor(max_workers=max(1, min(settings.fanout, len(hosts)))) as pool:
            list(pool.map(one, hosts))
