"""Slurm hosts: ``srun dslaunch ...`` inside a step, and ``--launcher slurm`` inside an allocation.

In a step the layout comes from ``SLURM_*``: one task per node makes this
task its node's agent, several make each task one rank. In an allocation
(salloc, sbatch) ``--launcher slurm`` (or ``auto``) runs one srun task per node,
and --include/--exclude/--num-nodes name Slurm nodes, not hostfile hosts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from dslaunch.cli.core_options import NO_GPU, CoreChoices
from dslaunch.errors import DslaunchError
from dslaunch.oslib.binding import usable_cores
from dslaunch.plan import Candidate, Elastic, NodePlan, SlurmSettings


@dataclass(frozen=True)
class SlurmHosts:
    nodes: tuple[NodePlan, ...]
    settings: SlurmSettings
    port: int  # 0: each step derives it from the job and step id
    elastic: Elastic = field(default_factory=Elastic)  # allocation mode, --nnodes MIN:MAX or --num-nodes N


def context(launcher: str, hostfile_given: bool, env: Mapping[str, str]) -> str | None:
    """``"step"``, ``"srun"`` or None (not a Slurm launch), from the launcher asked for."""
    if launcher not in ("auto", "slurm"):
        return None
    from dslaunch.slurmlib import layout

    if not layout.in_allocation(env):
        if launcher == "slurm":
            raise DslaunchError(
                "--launcher slurm runs srun inside a Slurm allocation, but SLURM_JOB_ID is not "
                "set: start it from salloc or an sbatch script"
            )
        return None
    if launcher == "auto" and (hostfile_given or "RANK" in env):
        return None  # an explicit hostfile, or a rank started by another launcher
    return "step" if layout.in_step(env) else "srun"


def hosts(kind: str, core: CoreChoices, launcher_args: tuple[str, ...], env: Mapping[str, str]) -> SlurmHosts:
    """The nodes Slurm gives this job (``kind`` from :func:`context`)."""
    from dslaunch.slurmlib import hostlist, layout

    try:
        found = _step(core, env) if kind == "step" else _allocation(core, launcher_args, env)
    except (layout.SlurmLayoutError, hostlist.HostlistError) as exc:
        raise DslaunchError(exc.message) from None
    return replace(found, settings=replace(found.settings, signals_ranks=layout.slurm_signals_ranks(env)))


def _step(core: CoreChoices, env: Mapping[str, str]) -> SlurmHosts:
    from dslaunch.slurmlib import layout

    used = [
        name
        for name, value in (("--include", core.include), ("--exclude", core.exclude), ("--num-nodes", core.num_nodes))
        if value
    ]
    if used:
        raise DslaunchError(
            f"inside an srun step Slurm has already chosen the nodes: drop {', '.join(used)} "
            "(give srun --nodelist/--exclude/--nodes instead)"
        )
    step = layout.read_step(env)
    mode = layout.step_mode(step, core.nproc)
    if mode == "node":
        nodes = layout.rank_nodes(step.hosts, _local_slots(core.nproc, env))
    else:
        found, first = [], 0
        for i, (host, count) in enumerate(zip(step.hosts, step.tasks_per_node)):
            found.append(NodePlan(host, i, tuple(str(k) for k in range(count)), tuple(range(first, first + count))))
            first += count
        nodes = tuple(found)
    port = core.master_port if core.port_given else layout.derive_port(step.job_id, step.step_id)
    return SlurmHosts(nodes, SlurmSettings(mode="node" if mode == "node" else "rank"), port)


def _allocation(core: CoreChoices, launcher_args: tuple[str, ...], env: Mapping[str, str]) -> SlurmHosts:
    from dslaunch.slurmlib import layout, srun

    all_hosts = layout.job_hosts(env)
    include = _hosts_of(core.include, "--include")
    exclude = _hosts_of(core.exclude, "--exclude")
    for name, given in (("--include", include), ("--exclude", exclude)):
        unknown = [h for h in given if h not in all_hosts]
        if unknown:
            raise DslaunchError(f"{name}: {', '.join(unknown)} not in this allocation ({', '.join(all_hosts)})")
    chosen = [h for h in all_hosts if (not include or h in include) and h not in exclude]
    if not chosen:
        raise DslaunchError("no nodes of the allocation are left after --include/--exclude")
    low, high = _node_range(core, chosen)
    nproc = core.nproc
    gpus = 0 if nproc == "cpu" else _gpus_per_node(env)
    if nproc == "gpu" and not gpus:
        raise DslaunchError(NO_GPU, option="--nproc-per-node")
    count = nproc if isinstance(nproc, int) else gpus or (_cpus_per_node(env) if nproc in ("cpu", "auto") else 1)
    slots = tuple(str(k) for k in range(count))
    nodes = layout.rank_nodes(tuple(chosen[:high]), slots)
    elastic = Elastic()
    if (low, high) != (len(chosen), len(chosen)):
        elastic = Elastic(tuple(Candidate(h, slots) for h in chosen), low, high)
    owned = srun.owned_option(launcher_args)
    if owned:
        raise DslaunchError(
            f"{owned!r} is set by dslaunch from the plan; choose nodes with --include/--exclude/--num-nodes instead",
            option="--launcher-args",
        )
    return SlurmHosts(
        nodes, SlurmSettings(mode="srun", exclude=tuple(exclude)), core.master_port if core.port_given else 0, elastic
    )


def _node_range(core: CoreChoices, chosen: list[str]) -> tuple[int, int]:
    """(MIN, MAX) nodes of the allocation's ``chosen`` ones: --nnodes MIN:MAX, --num-nodes N (N:N), else all.

    The nodes after MAX are spares: one replaces a node that fails as a node (docs/elastic.md).
    """
    if core.nnodes_range is not None and core.num_nodes is not None:
        raise DslaunchError("give either --nnodes MIN:MAX or --num-nodes N, not both", option="--nnodes")
    if core.nnodes_range is not None:
        low, high = core.nnodes_range
        what, option = f"--nnodes {low}:{high}", "--nnodes"
    elif core.num_nodes:
        low = high = core.num_nodes
        what, option = f"--num-nodes {low}", "--num-nodes"
    else:
        return len(chosen), len(chosen)
    if low > len(chosen):
        raise DslaunchError(
            f"{what} asks for at least {low} node(s) but only {len(chosen)} of the allocation are left: "
            f"{', '.join(chosen)}",
            option=option,
        )
    return low, min(high, len(chosen))


def _hosts_of(spec: str, hint: str) -> list[str]:
    from dslaunch.slurmlib import hostlist

    if not spec:
        return []
    hosts: list[str] = []
    for part in spec.split("@"):
        if ":" in part:
            raise DslaunchError(
                f"{part!r}: under Slurm only whole nodes can be chosen, e.g. 'n1@n[3-4]'; "
                "GPUs within a node are Slurm's to assign",
                option=hint,
            )
        hosts.extend(hostlist.expand(part))
    return hosts


def _gpus_per_node(env: Mapping[str, str]) -> int:
    """SLURM_GPUS_PER_NODE ('2', 'a100:2', 'gpu:a100:2') or SLURM_GPUS_ON_NODE; 0 when absent."""
    for name in ("SLURM_GPUS_PER_NODE", "SLURM_GPUS_ON_NODE"):
        text = env.get(name, "")
        match = re.search(r"([0-9]+)$", text.split(",")[0])
        if match:
            return int(match.group(1))
    return 0


def _cpus_per_node(env: Mapping[str, str]) -> int:
    text = env.get("SLURM_JOB_CPUS_PER_NODE", "")
    match = re.match(r"[0-9]+", text)
    return int(match.group(0)) if match else len(usable_cores())


def _local_slots(nproc: int | str | None, env: Mapping[str, str]) -> tuple[str, ...]:
    from dslaunch.oslib.gpus import gpu_labels

    gpus = () if nproc == "cpu" else gpu_labels(env)
    if nproc == "gpu" and not gpus:
        raise DslaunchError(NO_GPU, option="--nproc-per-node")
    if isinstance(nproc, int):
        return gpus[:nproc] if len(gpus) >= nproc else tuple(str(k) for k in range(nproc))
    if gpus:
        return gpus
    cpus = int(env.get("SLURM_CPUS_ON_NODE") or 0) or len(usable_cores())
    count = cpus if nproc in ("cpu", "auto") else 1
    return tuple(str(k) for k in range(count))
