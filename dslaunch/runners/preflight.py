"""``dslaunch --preflight`` on the hosts: the probe of ``preflight_probe``, run on each node by the plan's runner
(``Runner.run_on_nodes``), so this module names no transport."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from dslaunch.job.protocols import NodeAnswers, Runner
from dslaunch.plan import LaunchPlan, assign_ranks
from dslaunch.runners.preflight_probe import evaluate, local_expected, probe_command, render

RunOnNodes = Callable[[LaunchPlan, str], NodeAnswers]  # (plan, command) -> by node rank: a runner's run_on_nodes


def run_preflight(plan: LaunchPlan, runner: Runner) -> tuple[int, str]:
    """Probe every host of ``plan`` through ``runner``, the plan's: (exit code: 0 all usable, else 1; the report)."""
    expected = local_expected(plan.master_port)
    results = runner.run_on_nodes(plan, probe_command(plan.program.python, plan.master_port))
    rows = [evaluate(n.host, n.nproc, n.node_rank == 0, expected, results[n.node_rank]) for n in plan.nodes]
    report = f"dslaunch preflight via {plan.launcher}: {len(rows)} host(s)\n{render(rows)}"
    return (0 if all(r.ok for r in rows) else 1), report


def probe_hosts(plan: LaunchPlan, hosts: list[str], run: RunOnNodes) -> dict[str, str]:
    """Probe ``hosts`` (candidates of ``plan``) in parallel as --preflight does: reachable, same python,
    dslaunch and torch as this launcher, GPUs for the slots. The hosts that fail, with why (docs/elastic.md).
    ``run``: how to run the probe on each node of a plan (a runner's ``run_on_nodes``, or its own way)."""
    if not hosts:
        return {}
    slots = {c.host: c.slots for c in plan.elastic.candidates}
    probe_plan = replace(plan, nodes=assign_ranks({h: slots[h] for h in hosts}))
    expected = local_expected(0)
    results = run(probe_plan, probe_command(plan.program.python, 0))
    failures: dict[str, str] = {}
    for node in probe_plan.nodes:
        row = evaluate(node.host, node.nproc, False, expected, results[node.node_rank])
        if not row.ok:
            failures[node.host] = "; ".join(p.removeprefix(f"{node.host}: ") for p in row.problems)
    return failures
