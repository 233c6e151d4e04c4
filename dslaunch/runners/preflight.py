"""``dslaunch --preflight`` on the hosts: the probe of ``preflight_probe``, over the runners' ssh/pdsh."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from dslaunch.plan import LaunchPlan, assign_ranks
from dslaunch.runners.preflight_probe import evaluate, local_expected, parse_probe, probe_command, render


def _run_local(command: str, timeout: float) -> tuple[int | None, str, str]:
    try:
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", f"no answer within {timeout:.0f} s"
    return done.returncode, done.stdout, done.stderr


def _results_ssh(plan: LaunchPlan, command: str) -> dict[int, tuple[int | None, str, str]]:
    from dslaunch.runners.ssh.connect import connect_all, run_on

    settings = plan.remote
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
    from dslaunch.runners.pdsh.invocation import pdsh_command, pdsh_env, pdsh_label, pdsh_labels

    settings = plan.remote
    pdsh_labels([n.host for n in plan.nodes])
    argv = pdsh_command(settings, [n.host for n in plan.nodes], command.replace("%", "%%"))
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
    own: dict[str, list[str]] = {}  # pdsh's lines ("ssh exited with exit code 127"): before the host's own words
    pdsh_mark = f"pdsh@{os.uname().nodename}: "
    for text, sink in ((done.stdout, outs), (done.stderr, errs)):
        for line in text.splitlines():
            host, _, rest = line.removeprefix(pdsh_mark).partition(": ")
            (own if sink is errs and line.startswith(pdsh_mark) else sink).setdefault(host, []).append(rest)
    results: dict[int, tuple[int | None, str, str]] = {}
    for node in plan.nodes:
        key = pdsh_label(node.host)
        out = "\n".join(outs.get(key, []))
        err = "\n".join(own.get(key, []) + errs.get(key, []))
        results[node.node_rank] = (0 if parse_probe(out) else 255, out, err)
    return results


def _results_slurm(plan: LaunchPlan, command: str) -> dict[int, tuple[int | None, str, str]]:
    """One srun task on each node of ``plan`` (inside the allocation); its output names the node it ran on."""
    from dslaunch.slurmlib.srun import probe_argv, probe_outputs

    hosts = [n.host for n in plan.nodes]
    try:
        done = subprocess.run(
            probe_argv(hosts, command, plan.run_id),
            capture_output=True,
            text=True,
            timeout=plan.remote.connect_timeout + 60,
            stdin=subprocess.DEVNULL,
        )
        outs, why = probe_outputs(done.stdout), (done.stderr.strip().splitlines() or [f"srun exit {done.returncode}"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        outs, why = {}, [f"srun: {exc}"]
    return {
        n.node_rank: (0, outs[n.host], "") if n.host in outs else (None, "", f"no answer through srun ({why[-1]})")
        for n in plan.nodes
    }


def _results(plan: LaunchPlan, command: str) -> dict[int, tuple[int | None, str, str]]:
    if plan.launcher == "ssh":
        results = _results_ssh(plan, command)
    elif plan.launcher == "pdsh":
        results = _results_pdsh(plan, command)
    elif plan.launcher == "slurm":
        results = _results_slurm(plan, command)
    else:
        with ThreadPoolExecutor(max_workers=8) as pool:
            outs = list(pool.map(lambda _n: _run_local(command, 60), plan.nodes))
        results = {n.node_rank: r for n, r in zip(plan.nodes, outs)}
    return results


def run_preflight(plan: LaunchPlan) -> tuple[int, str]:
    """Probe every host of ``plan`` through its launcher: (exit code: 0 all usable, else 1; the report)."""
    expected = local_expected(plan.master_port)
    results = _results(plan, probe_command(plan.program.python, plan.master_port))
    rows = [evaluate(n.host, n.nproc, n.node_rank == 0, expected, results[n.node_rank]) for n in plan.nodes]
    report = f"dslaunch preflight via {plan.launcher}: {len(rows)} host(s)\n{render(rows)}"
    return (0 if all(r.ok for r in rows) else 1), report


Results = Callable[[LaunchPlan, str], dict[int, tuple[int | None, str, str]]]  # (plan, command) -> by node rank


def probe_hosts(plan: LaunchPlan, hosts: list[str], run: Results | None = None) -> dict[str, str]:
    """Probe ``hosts`` (candidates of ``plan``) in parallel as --preflight does: reachable, same python,
    dslaunch and torch as this launcher, GPUs for the slots. The hosts that fail, with why (docs/elastic.md).
    ``run``: how to run the probe on each node of a plan (default: over the plan's launcher, new sessions)."""
    if not hosts:
        return {}
    slots = {c.host: c.slots for c in plan.elastic.candidates}
    probe_plan = replace(plan, nodes=assign_ranks({h: slots[h] for h in hosts}))
    expected = local_expected(0)
    results = (run or _results)(probe_plan, probe_command(plan.program.python, 0))
    failures: dict[str, str] = {}
    for node in probe_plan.nodes:
        row = evaluate(node.host, node.nproc, False, expected, results[node.node_rank])
        if not row.ok:
            failures[node.host] = "; ".join(p.removeprefix(f"{node.host}: ") for p in row.problems)
    return failures
