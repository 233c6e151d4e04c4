"""Connections for the ssh runner and ``--preflight`` over ssh: to many hosts at once, and one command over one."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dslaunch.plan import LaunchPlan, RemoteSettings

if TYPE_CHECKING:
    from dslaunch.job.protocols import NodeAnswers

# Bytes per read of a channel: paramiko moves what is left in its buffer (up to the 2 MiB window) down after each
# read, so small reads of a full buffer cost more than the bytes they return; much larger ones cost memory.
RECV = 256 << 10


def connect_all(plan: LaunchPlan, settings: RemoteSettings) -> tuple[dict[int, Any], dict[str, str]]:
    """Connect to every node, at most ``fanout`` handshakes at a time; return connections and failures."""
    conns, failures = connect_hosts([node.host for node in plan.nodes], settings)
    return {node.node_rank: conns[node.host] for node in plan.nodes if node.host in conns}, failures


def connect_hosts(hosts: list[str], settings: RemoteSettings) -> tuple[dict[str, Any], dict[str, str]]:
    """Connect to each of ``hosts``, at most ``fanout`` handshakes at a time; connections and failures by host."""
    from dslaunch.runners.ssh.paramiko_conn import ConnectError, connect

    def one(host: str) -> Any:
        return connect(
            host, settings.ssh_config, settings.ssh_port, settings.accept_new_hosts, settings.connect_timeout
        )

    conns: dict[str, Any] = {}
    failures: dict[str, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(settings.fanout, len(hosts)))) as pool:
        futures = {host: pool.submit(one, host) for host in hosts}
        for host, future in futures.items():
            try:
                conns[host] = future.result()
            except ConnectError as exc:
                failures[host] = str(exc)
    return conns, failures


def run_on(conn: Any, command: str, timeout: float) -> tuple[int, str, str]:
    """Run one command over an open connection; (status, stdout, stderr)."""
    channel = conn.client.get_transport().open_session(timeout=timeout)
    channel.settimeout(timeout)
    channel.exec_command(command)
    channel.shutdown_write()
    out = channel.makefile("rb").read().decode("utf-8", "replace")
    err = channel.makefile_stderr("rb").read().decode("utf-8", "replace")
    return channel.recv_exit_status(), out, err


def run_on_each(plan: LaunchPlan, command: str) -> NodeAnswers:
    """``command`` once on each node of ``plan``, each over a new connection, at most ``fanout`` at a time."""
    settings = plan.remote
    conns, failures = connect_all(plan, settings)
    results: NodeAnswers = {}
    for node in plan.nodes:
        if node.host in failures:
            results[node.node_rank] = (None, "", failures[node.host])

    def one(node_rank: int) -> tuple[int | None, str, str]:
        try:
            return run_on(conns[node_rank], command, settings.connect_timeout + 20)
        except Exception as exc:  # noqa: BLE001 - any transport error is this host's failure
            return None, "", str(exc)

    with ThreadPoolExecutor(max_workers=max(1, min(settings.fanout, len(conns)))) as pool:
        for node_rank, result in zip(conns, pool.map(one, conns)):
            results[node_rank] = result
    for conn in conns.values():
        conn.close()
    return results
