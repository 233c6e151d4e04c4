"""What the ssh and pdsh runners share, written once over one primitive: run a command on a host.

- ``--master-port 0``: ask node 0 for a free port before any agent starts;
- a lost node (agent gone without reporting): kill what is left of the job there by run id;
- a job that cannot start: every failing host named, exit ``START_FAILED`` (255, as ssh).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from dslaunch.job.result import START_FAILED, JobResult
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.remote import common
from dslaunch.remote.agent_command import reap_command

ALL_HOSTS = "(all)"  # a start failure that is no host's fault (pdsh cannot run, say)


def report_start_failures(failures: dict[str, str]) -> JobResult:
    for host, why in failures.items():
        common.write_err(f"dslaunch: cannot start the node agent on {host}: {why}\n".encode())
    common.write_err(b"dslaunch: nothing was started (or what was started has been stopped)\n")
    common.flush_err()
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
                plan.nodes[0].host, common.port_probe_command(plan.program.python), settings.connect_timeout + 20
            )
        except OSError as exc:
            return plan, f"cannot pick a free master port there: {exc}"
        port = common.parse_port(out)
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
                common.write_err(f"dslaunch: could not clean up {host}: {exc}\n".encode())

        with ThreadPoolExecutor(max_workers=max(1, min(settings.fanout, len(hosts)))) as pool:
            list(pool.map(one, hosts))
