"""Slurm: ``srun dslaunch ...`` inside a step, and ``--launcher slurm`` inside an allocation.

In a step the layout comes from ``SLURM_*``: one task per node makes this
task its node's agent, several make each task one rank. In an allocation
(salloc, sbatch) ``--launcher slurm`` (or ``auto``) runs one srun task per node.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from typing import Any

import click
from click.core import ParameterSource

from dslaunch.cli.draft import PlanDraft
from dslaunch.plan import NodePlan

PARAMS: list[click.Parameter] = []
FILTERS = ("include", "exclude", "num_nodes")
_DEFAULT_PORT = 29500


def slurm_context(values: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """``"step"``, ``"srun"`` or None (not a Slurm launch)."""
    launcher = str(values.get("launcher") or "auto").lower()
    if launcher not in ("auto", "slurm"):
        return None
    from dslaunch.slurm import layout

    if not layout.in_allocation(env):
        if launcher == "slurm":
            raise click.UsageError(
                "--launcher slurm runs srun inside a Slurm allocation, but SLURM_JOB_ID is not "
                "set: start it from salloc or an sbatch script"
            )
        return None
    if launcher == "auto" and (values.get("hostfile") or "RANK" in env):
        return None  # an explicit hostfile, or a rank started by another launcher
    return "step" if layout.in_step(env) else "srun"


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    from dslaunch.slurm import address, hostlist, layout

    env = os.environ
    context = slurm_context(values, env)
    if context is None:
        return
    filters = values.get("slurm_filters") or {}
    try:
        if context == "step":
            _step(values, draft, env, filters)
        else:
            _allocation(values, draft, env, filters)
    except (layout.SlurmLayoutError, hostlist.HostlistError) as exc:
        raise click.UsageError(str(exc)) from None
    draft.launcher = "slurm"
    draft.runner_options[layout.SIGNALS_OPTION] = layout.slurm_signals_ranks(env)
    if not values.get("master_addr"):
        # Written back to values so later areas (remote options) take it as given.
        values["master_addr"] = address.node_address(draft.nodes[0].host, env)
    draft.master_addr = values["master_addr"]
    if not draft.dry_run and draft.program is not None and not (draft.program.module or draft.program.no_python):
        if not os.path.isfile(draft.program.target):
            raise click.BadParameter(
                f"script {draft.program.target!r} does not exist (use -m for a module)", param_hint="'SCRIPT'"
            )


def _explicit_port(values: Mapping[str, Any]) -> int:
    """The user's --master-port, or 0 (derive from the job): 0 also means derive here."""
    port = int(values.get("master_port") or 0)
    try:
        source = click.get_current_context().get_parameter_source("master_port")
    except RuntimeError:
        source = None
    if port == _DEFAULT_PORT and source in (ParameterSource.DEFAULT, None):
        return 0
    return port


def _step(values: dict[str, Any], draft: PlanDraft, env: Mapping[str, str], filters: Mapping[str, Any]) -> None:
    from dslaunch.slurm import layout

    used = [f"--{name.replace('_', '-')}" for name, value in filters.items() if value]
    if used:
        raise click.UsageError(
            f"inside an srun step Slurm has already chosen the nodes: drop {', '.join(used)} "
            "(give srun --nodelist/--exclude/--nodes instead)"
        )
    step = layout.read_step(env)
    nproc = values.get("nproc_per_node")
    mode = layout.step_mode(step, nproc)
    if mode == "node":
        draft.nodes = layout.rank_nodes(step.hosts, _local_slots(nproc, env))
    else:
        nodes, first = [], 0
        for i, (host, count) in enumerate(zip(step.hosts, step.tasks_per_node)):
            nodes.append(NodePlan(host, i, tuple(str(k) for k in range(count)), tuple(range(first, first + count))))
            first += count
        draft.nodes = tuple(nodes)
    draft.runner_options["slurm_mode"] = mode
    port = _explicit_port(values)
    draft.master_port = port or layout.derive_port(step.job_id, step.step_id)


def _allocation(values: dict[str, Any], draft: PlanDraft, env: Mapping[str, str], filters: Mapping[str, Any]) -> None:
    from dslaunch.slurm import layout, srun

    hosts = layout.job_hosts(env)
    include = _hosts_of(filters.get("include"), "--include")
    exclude = _hosts_of(filters.get("exclude"), "--exclude")
    for name, given in (("--include", include), ("--exclude", exclude)):
        unknown = [h for h in given if h not in hosts]
        if unknown:
            raise click.UsageError(f"{name}: {', '.join(unknown)} not in this allocation ({', '.join(hosts)})")
    chosen = [h for h in hosts if (not include or h in include) and h not in exclude]
    num_nodes = filters.get("num_nodes")
    if num_nodes:
        if num_nodes > len(chosen):
            raise click.UsageError(
                f"--num-nodes {num_nodes} but only {len(chosen)} node(s) are left: {', '.join(chosen)}"
            )
        chosen = chosen[:num_nodes]
    if not chosen:
        raise click.UsageError("no nodes of the allocation are left after --include/--exclude")
    nproc = values.get("nproc_per_node")
    count = nproc if isinstance(nproc, int) else _gpus_per_node(env) or (_cpus_per_node(env) if nproc == "auto" else 1)
    draft.nodes = layout.rank_nodes(tuple(chosen), tuple(str(k) for k in range(count)))
    launcher_args = _launcher_args(values)
    owned = srun.owned_option(launcher_args)
    if owned:
        raise click.BadParameter(
            f"{owned!r} is set by dslaunch from the plan; choose nodes with --include/--exclude/--num-nodes instead",
            param_hint="'--launcher-args'",
        )
    draft.runner_options.update(slurm_mode="srun", slurm_exclude=list(exclude), slurm_launcher_args=launcher_args)
    draft.master_port = _explicit_port(values)


def _hosts_of(spec: str | None, hint: str) -> list[str]:
    from dslaunch.slurm import hostlist

    if not spec:
        return []
    hosts: list[str] = []
    for part in spec.split("@"):
        if ":" in part:
            raise click.BadParameter(
                f"{part!r}: under Slurm only whole nodes can be chosen, e.g. 'n1@n[3-4]'; "
                "GPUs within a node are Slurm's to assign",
                param_hint=f"'{hint}'",
            )
        hosts.extend(hostlist.expand(part))
    return hosts


def _launcher_args(values: Mapping[str, Any]) -> list[str]:
    raw = values.get("launcher_args")
    if not raw:
        return []
    if isinstance(raw, (list, tuple)):
        return list(raw)
    try:
        return shlex.split(raw)
    except ValueError as exc:
        raise click.BadParameter(f"cannot split {raw!r}: {exc}", param_hint="'--launcher-args'") from None


def _gpus_per_node(env: Mapping[str, str]) -> int:
    """SLURM_GPUS_PER_NODE ('2', 'a100:2', 'gpu:a100:2') or SLURM_GPUS_ON_NODE; 0 when absent."""
    for name in ("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"):
        text = env.get(name, "")
        match = re.search(r"(\d+)$", text.split(",")[0])
        if match:
            return int(match.group(1))
    return 0


def _cpus_per_node(env: Mapping[str, str]) -> int:
    text = env.get("SLURM_JOB_CPUS_PER_NODE", "")
    match = re.match(r"\d+", text)
    return int(match.group(0)) if match else (os.cpu_count() or 1)


def _local_slots(nproc: int | str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    from dslaunch.gpus import gpu_labels

    gpus = gpu_labels(env)
    if isinstance(nproc, int):
        return gpus[:nproc] if len(gpus) >= nproc else tuple(str(k) for k in range(nproc))
    if gpus:
        return gpus
    count = int(env.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1) if nproc == "auto" else 1
    return tuple(str(k) for k in range(count))
