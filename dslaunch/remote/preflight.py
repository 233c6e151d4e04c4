"""``dslaunch --preflight``: check every host in parallel before a job, print a table."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from dslaunch import __version__

if TYPE_CHECKING:
    from dslaunch.cli.draft import PlanDraft
    from dslaunch.plan import LaunchPlan

PROBE = r"""
import json, os, socket, sys
from importlib import metadata
def ver(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
vis = os.environ.get("CUDA_VISIBLE_DEVICES")
try:
    if vis is not None:
        gpus = len([v for v in vis.split(",") if v.strip()])
    else:
        gpus = len(os.listdir("/proc/driver/nvidia/gpus"))
except OSError:
    gpus = 0
port = int(sys.argv[1])
free = None
if port:
    s = socket.socket()
    try:
        s.bind(("", port)); free = True
    except OSError:
        free = False
    finally:
        s.close()
print("@dslaunch-preflight " + json.dumps({"python": sys.version.split()[0], "executable": sys.executable,
      "dslaunch": ver("dslaunch"), "torch": ver("torch"), "gpus": gpus, "port_free": free}))
"""
MARK = "@dslaunch-preflight "


@dataclass(frozen=True)
class Expected:
    python: str
    dslaunch: str
    torch: str | None
    gpus: int
    port: int


@dataclass(frozen=True)
class Row:
    host: str
    ok: bool
    cells: tuple[str, ...]
    problems: tuple[str, ...]


HEADER = ("host", "reach", "python", "dslaunch", "torch", "gpus/slots", "master port", "result")


def local_expected(port: int) -> Expected:
    from importlib import metadata

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    from dslaunch.cli.core_options import _gpu_labels

    return Expected(sys.version.split()[0], __version__, torch, len(_gpu_labels(dict(os.environ))), port)


def parse_probe(output: str) -> dict[str, Any] | None:
    for line in output.splitlines():
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK) :])
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def evaluate(
    host: str, slots: int, is_master: bool, expected: Expected, status: int | None, output: str, err: str
) -> Row:
    """One table row from a host's probe result (pure)."""
    data = parse_probe(output) if status == 0 else None
    if data is None:
        why = (err.strip().splitlines() or [f"status {status}"])[-1]
        return Row(host, False, (host, "NO", "-", "-", "-", "-", "-", "FAIL"), (f"{host}: not usable: {why}",))
    problems = []
    if data["python"] != expected.python:
        problems.append(
            f"{host}: python {data['python']} ({data['executable']}) differs from the launcher's {expected.python}"
        )
    if data["dslaunch"] != expected.dslaunch:
        problems.append(
            f"{host}: dslaunch {data['dslaunch'] or 'missing'} differs from the launcher's {expected.dslaunch}"
        )
    if data["torch"] != expected.torch:
        problems.append(
            f"{host}: torch {data['torch'] or 'missing'} differs from the launcher's {expected.torch or 'none'}"
        )
    gpus = int(data["gpus"])
    if (gpus or expected.gpus) and gpus < slots:
        problems.append(f"{host}: {gpus} visible GPU(s) for {slots} slot(s)")
    port_cell = "-"
    if is_master:
        if not expected.port:
            port_cell = "picked at launch"
        elif data["port_free"]:
            port_cell = f"{expected.port} free"
        else:
            port_cell = f"{expected.port} IN USE"
            problems.append(f"{host}: master port {expected.port} is already in use")
    cells = (
        host,
        "yes",
        data["python"],
        data["dslaunch"] or "missing",
        data["torch"] or "none",
        f"{gpus}/{slots}",
        port_cell,
        "FAIL" if problems else "ok",
    )
    return Row(host, not problems, cells, tuple(problems))


def render(rows: list[Row]) -> str:
    table = [HEADER, *(r.cells for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    for r in rows:
        lines += [f"  - {p}" for p in r.problems]
    return "\n".join(lines)


def probe_command(python: str, port: int) -> str:
    return shlex.join([python, "-c", PROBE, str(port)])


def _run_local(command: str, timeout: float) -> tuple[int | None, str, str]:
    try:
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"no answer within {timeout:.0f} s"
    return done.returncode, done.stdout, done.stderr


def _results_ssh(plan: LaunchPlan, command: str) -> dict[int, tuple[int | None, str, str]]:
    from dslaunch.remote.command import RemoteSettings
    from dslaunch.runners.ssh import connect_all, run_on

    settings = RemoteSettings.of(plan)
    conns, failures = connect_all(plan, settings)
    results: dict[int, tuple[int | None, str, str]] = {}
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


def _results_pdsh(plan: LaunchPlan, command: str) -> dict[int, tuple[int | None, str, str]]:
    from dslaunch.remote.command import RemoteSettings
    from dslaunch.runners.pdsh import pdsh_env

    settings = RemoteSettings.of(plan)
    argv = [
        "pdsh",
        "-R",
        "ssh",
        "-f",
        str(max(settings.fanout, len(plan.nodes))),
        "-t",
        str(max(1, round(settings.connect_timeout))),
        "-w",
        ",".join(n.host for n in plan.nodes),
        command.replace("%", "%%"),
    ]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=pdsh_env(settings, dict(os.environ)),
        timeout=settings.connect_timeout + 60,
        stdin=subprocess.DEVNULL,
    )
    outs: dict[str, list[str]] = {}
    errs: dict[str, list[str]] = {}
    for text, sink in ((done.stdout, outs), (done.stderr, errs)):
        for line in text.splitlines():
            host, _, rest = line.removeprefix(f"pdsh@{os.uname().nodename}: ").partition(": ")
            sink.setdefault(host, []).append(rest)
    results: dict[int, tuple[int | None, str, str]] = {}
    for node in plan.nodes:
        key = node.host.rpartition("@")[2]
        out = "\n".join(outs.get(key, []))
        results[node.node_rank] = (0 if parse_probe(out) else 255, out, "\n".join(errs.get(key, [])))
    return results


def run_preflight(draft: PlanDraft) -> int:
    from dslaunch.cli.command import choose_launcher

    if draft.program is not None and draft.program.target is None:
        import dataclasses

        draft.program = dataclasses.replace(draft.program, target="-")
    draft.launcher = choose_launcher(draft)
    plan = draft.freeze()
    expected = local_expected(plan.master_port)
    command = probe_command(plan.program.python, plan.master_port)
    if plan.launcher == "ssh":
        results = _results_ssh(plan, command)
    elif plan.launcher == "pdsh":
        results = _results_pdsh(plan, command)
    else:
        with ThreadPoolExecutor(max_workers=8) as pool:
            outs = list(pool.map(lambda _n: _run_local(command, 60), plan.nodes))
        results = {n.node_rank: r for n, r in zip(plan.nodes, outs)}
    rows = [evaluate(n.host, n.nproc, n.node_rank == 0, expected, *results[n.node_rank]) for n in plan.nodes]
    click.echo(f"dslaunch preflight via {plan.launcher}: {len(rows)} host(s)")
    click.echo(render(rows))
    return 0 if all(r.ok for r in rows) else 1
