"""The one place that turns parsed options into the frozen :class:`LaunchPlan`.

Each option area parses its own options into a small record; :func:`decide` reads
them in one order: where Slurm stands, the hosts, the launcher, the address, the
port, then the rank environment and the checks that need the whole plan. It only
reads (files, the environment, PATH, ssh config); what changes the world (logging
set-up, the pid file, preflight, the launch itself) happens after it returns.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from dslaunch.cli import mesh_options, parity_options, pod_plan, remote_options, run_ids, slurm_hosts
from dslaunch.cli.core_options import LOCAL_NAMES, CoreChoices, resource_pool
from dslaunch.cli.log_options import LogChoices
from dslaunch.cli.mesh_options import MeshChoice
from dslaunch.cli.parity_options import ParityChoices
from dslaunch.cli.pod_options import PodChoices
from dslaunch.cli.remote_options import RemoteChoices
from dslaunch.cli.slurm_hosts import SlurmHosts
from dslaunch.cli.stop_options import StopChoices
from dslaunch.errors import DslaunchError
from dslaunch.inputs import hostfile
from dslaunch.inputs.config import unknown_key_warnings
from dslaunch.masking import is_secret_name
from dslaunch.observe.settings import ObserveSettings
from dslaunch.plan import (
    Candidate,
    Elastic,
    LaunchPlan,
    NodePlan,
    PodSettings,
    Program,
    Restarts,
    SlurmSettings,
    TransportFacts,
    assign_ranks,
)

REMOTE_LAUNCHERS = ("pdsh", "ssh")  # what auto picks for remote hosts (and --force-multi), first found
LAUNCHER_ARGS_USERS = ("openmpi", "mpich", "slurm")  # the runners that read plan.launcher_args
ELASTIC_LAUNCHERS = ("ssh", "pdsh", "slurm")  # the runners that choose each attempt's nodes: spares and MIN:MAX
# What each launcher's transport does that the agent, the job core, the output and the observer act on
# (plan.transport): decided here, so nothing outside cli/ and runners/ compares plan.launcher (tests/test_imports.py).
TRANSPORTS: dict[str, TransportFacts] = {
    "local": TransportFacts(),
    "ssh": TransportFacts(heartbeats=True),  # runners/ssh/runner.Keepalive
    "pdsh": TransportFacts(teardown_by_signal=True),  # no stdin to one agent: a short ssh signals it (reap.py)
    "slurm": TransportFacts(supervises_own_node=True),  # each srun task supervises its node (slurm/in_step.py)
    "openmpi": TransportFacts(stacks_on_demand=False),  # mpirun does not pass SIGQUIT on to the agents
    "mpich": TransportFacts(stacks_on_demand=False),  # nor does mpiexec
    "node": TransportFacts(console_per_node=True, node0_holds_job_figures=True),  # a pod each (pods/)
}


@dataclass(frozen=True)
class Choices:
    """Every option area's record."""

    core: CoreChoices
    logs: LogChoices
    remote: RemoteChoices
    parity: ParityChoices
    mesh: MeshChoice | None
    restarts: Restarts = field(default_factory=Restarts)
    pods: PodChoices | None = None
    no_restart_on: tuple[int, ...] = ()  # --no-restart-on
    stop: StopChoices = field(default_factory=StopChoices)
    observe: ObserveSettings = field(default_factory=ObserveSettings)  # breakdown, stragglers, metrics


@dataclass(frozen=True)
class Decision:
    plan: LaunchPlan
    secrets: frozenset[str]  # values to mask wherever a command or the environment is printed
    warnings: tuple[str, ...]  # for stderr, once


def decide(c: Choices, environ: Mapping[str, str]) -> Decision:
    core = c.core
    warnings = list(unknown_key_warnings(core.config))
    slurm_kind = slurm_hosts.context(core.launcher, core.pool is not None, environ)
    slurm = slurm_hosts.hosts(slurm_kind, core, c.parity.launcher_args, environ) if slurm_kind else None
    _check_node_range(c, slurm.settings.mode if slurm else None)
    pod_range = None if slurm else pod_plan.elastic_range(c)
    nodes, elastic = _where(c, slurm, pod_range, environ)
    pod_rank = 0 if pod_range is not None else c.remote.node_rank  # a pod's launcher is the "node" runner
    launcher = pick_launcher(
        core.launcher, nodes, slurm=slurm is not None, node_rank=pod_rank, force_multi=c.parity.force_multi
    )
    elastic = _elastic_for(launcher, elastic)
    remote = launcher != "node" and (core.launcher in REMOTE_LAUNCHERS or any(n.host not in LOCAL_NAMES for n in nodes))
    if remote:
        remote_options.check_hosts([c.host for c in elastic.candidates] or [n.host for n in nodes])
    ssh_config = remote_options.ssh_config_path(c.remote.ssh_config) if remote else None
    given_addr = core.master_addr or (c.pods.endpoint[0] if pod_range and c.pods and c.pods.endpoint else None)
    master_addr = pick_address(given_addr, launcher, nodes, remote=remote, ssh_config=ssh_config, environ=environ)
    master_port = (
        slurm.port if slurm else pod_plan.pods_port(c, core.master_port) if launcher == "node" else core.master_port
    )
    env, secrets = _rank_env(c, remote, environ)
    if c.mesh is not None:
        warnings += mesh_options.check(c.mesh, pod_plan.mesh_nodes(c.mesh, nodes, pod_range))
        env["DSLAUNCH_MESH"] = c.mesh.spec.text()
    _check(c, launcher, nodes, master_port)
    warnings += _launcher_checks(c, launcher, slurm_mode=slurm.settings.mode if slurm else None)
    program, preload = _program(c, warnings)
    plans_alone = launcher == "node" or (slurm is not None and slurm.settings.mode != "srun")
    shared = run_ids.shared_id(master_addr, master_port, nodes, core.program, environ) if plans_alone else None
    plan = LaunchPlan(
        launcher=launcher,
        run_id=run_ids.pick(core.run_id, shared, environ),
        nodes=nodes,
        master_addr=master_addr,
        master_port=master_port,
        program=program,
        shutdown_timeout=core.shutdown_timeout,
        log_dir=core.log_dir,
        cwd=c.remote.remote_cwd or core.cwd,
        env=tuple(sorted(env.items())),
        remote=c.remote.settings(ssh_config),
        slurm=slurm.settings if slurm else SlurmSettings(),
        launcher_args=c.parity.launcher_args,
        bind_cores=c.parity.bind_cores,
        manual_node=None if pod_range else c.remote.node_rank,
        restarts=c.restarts,
        no_restart_on=c.no_restart_on,
        hang_timeout=core.hang_timeout,
        preload=preload,
        elastic=replace(elastic, fixed_addr=bool(core.master_addr)) if elastic.candidates else elastic,
        # one launcher per node: a pod's, or DeepSpeed's --no_ssh --node_rank with a hostfile, joined alike
        pods=pod_plan.pod_settings(c.pods, master_addr, master_port, pod_range)
        if launcher == "node"
        else PodSettings(),
        **c.stop.plan_fields(),
        transport=TRANSPORTS[launcher],
    )
    return Decision(plan, frozenset(secrets), tuple(warnings))


def _where(
    c: Choices, slurm: SlurmHosts | None, pod_range: tuple[int, int] | None, environ: Mapping[str, str]
) -> tuple[tuple[NodePlan, ...], Elastic]:
    """The plan's nodes, and its candidate hosts: Slurm's, an elastic pod job's, one pod's, or the hostfile's."""
    if slurm:
        return slurm.nodes, slurm.elastic
    if pod_range is not None:
        return pod_plan.elastic_pod_nodes(c, pod_range, environ), Elastic()
    if (c.core.nnodes or 1) > 1:
        return pod_plan.pod_nodes(c, environ), Elastic()
    return _nodes(c.core, environ)


def _launcher_checks(c: Choices, launcher: str, *, slurm_mode: str | None) -> list[str]:
    """What the chosen launcher refuses (a user error) or ignores (a warning)."""
    if slurm_mode == "rank" and c.restarts.max_restarts:
        raise DslaunchError(
            "in Slurm's rank mode each srun task becomes its rank, so no dslaunch is left to restart it: "
            "use node mode (one task per node), or run dslaunch outside srun",
            option="--max-restarts",
        )
    if c.parity.launcher_args and launcher not in LAUNCHER_ARGS_USERS:
        return [
            f"dslaunch: warning: --launcher-args is only used by the {', '.join(LAUNCHER_ARGS_USERS)} "
            f"launchers; ignored with --launcher {launcher}"
        ]
    return []


def _program(c: Choices, warnings: list[str]) -> tuple[Program, tuple[str, ...]]:
    """What each rank runs, as the parity and remote options change it, and the modules to preload."""
    program, preload = c.core.program, c.core.preload
    if preload and program.no_python:
        warnings.append("dslaunch: warning: --preload is ignored with --no-python: the ranks are not Python")
        preload = ()
    if c.remote.remote_python:
        program = replace(program, python=c.remote.remote_python)
    if c.parity.local_rank_arg:
        program = replace(program, local_rank_arg=True)
    return program, preload


def _nodes(core: CoreChoices, environ: Mapping[str, str]) -> tuple[tuple[NodePlan, ...], Elastic]:
    """The nodes of attempt 0 and, with a node range (or --num-nodes below the hostfile), the candidates."""
    wanted = _node_count(core)
    try:
        pool = resource_pool(core if wanted is None else replace(core, num_nodes=None), environ)
    except hostfile.FilterError as exc:
        raise DslaunchError(exc.message) from None
    candidates = tuple(Candidate(host, tuple(slots)) for host, slots in pool.items() if slots)
    if not candidates:
        raise DslaunchError("no slots left to run on after --include/--exclude")
    if wanted is None:
        return assign_ranks(pool), Elastic()
    low, high = wanted
    if len(candidates) < low:
        what = f"--nnodes {low}:{high}" if core.num_nodes is None else f"--num-nodes {low}"
        raise DslaunchError(
            f"{what} asks for at least {low} node(s) but the hostfile has {len(candidates)}: "
            f"{', '.join(c.host for c in candidates)}",
            option="--nnodes" if core.num_nodes is None else "--num-nodes",
        )
    active = {c.host: c.slots for c in candidates[:high]}
    if low == high == len(candidates) and core.nnodes_range is None:
        return assign_ranks(active), Elastic()  # --num-nodes of every host: as without it
    return assign_ranks(active), Elastic(candidates, low, min(high, len(candidates)))


def _node_count(core: CoreChoices) -> tuple[int, int] | None:
    """(MIN, MAX) of a hostfile job: --nnodes MIN:MAX, or --num-nodes N (N:N, the hosts after N are spares)."""
    if core.pool is None:
        return None
    if core.nnodes_range is not None:
        if core.num_nodes is not None:
            raise DslaunchError("give either --nnodes MIN:MAX or --num-nodes N, not both", option="--nnodes")
        return core.nnodes_range
    if core.num_nodes is None or core.include or core.exclude:
        return None  # hostfile.select refuses --num-nodes with filters, as before
    return core.num_nodes, core.num_nodes


def _check_node_range(c: Choices, slurm_mode: str | None) -> None:
    """--nnodes MIN:MAX needs one launcher and a hostfile (or an allocation); refused with --node-rank and in a step."""
    given = c.core.nnodes_range
    if given is None or (given[0] == given[1] and c.core.pool is None):
        return  # --nnodes N alone: torchrun's one launcher per node (pod_plan.pod_nodes)
    text = f"{given[0]}:{given[1]}"
    if c.core.pool is None and slurm_mode is None:
        return  # one launcher per pod, an elastic range (pod_plan.elastic_range); torchrun ignores --node-rank there
    if c.remote.node_rank is not None:
        raise DslaunchError(
            f"--nnodes {text} with --node-rank: one launcher per node has no elastic node range or spares yet; "
            "run one dslaunch with -H HOSTFILE --nnodes MIN:MAX (it starts every node over ssh/pdsh), "
            "or give --nnodes N --node-rank R with a fixed N",
            option="--nnodes",
        )
    if slurm_mode not in (None, "srun"):
        raise DslaunchError(
            f"--nnodes {text} inside an srun step: Slurm has already chosen the step's nodes; run dslaunch "
            "from the allocation (salloc/sbatch, no srun) to use a node range and spares",
            option="--nnodes",
        )
    if c.core.pool is None and slurm_mode is None:
        raise DslaunchError(
            f"--nnodes {text}: dslaunch has no elastic node range without a hostfile: give -H HOSTFILE listing "
            "the candidate hosts (one dslaunch starts them all), or --nnodes N --node-rank R",
            option="--nnodes",
        )


def _elastic_for(launcher: str, elastic: Elastic) -> Elastic:
    """Spares and node ranges need a runner that starts each node on its own (ssh, pdsh)."""
    if not elastic.candidates or launcher in ELASTIC_LAUNCHERS:
        return elastic
    if elastic.nnodes_min == elastic.nnodes_max:
        return Elastic()  # --num-nodes N: the hosts after N stay unused, as before
    raise DslaunchError(
        f"--nnodes {elastic.nnodes_min}:{elastic.nnodes_max} needs --launcher ssh, pdsh or slurm: {launcher} starts "
        "every node from one host list that dslaunch cannot change between attempts; "
        "use --launcher ssh or pdsh, or a fixed --num-nodes N",
        option="--nnodes",
    )


def pick_launcher(
    asked: str, nodes: Sequence[NodePlan], *, slurm: bool, node_rank: int | None, force_multi: bool
) -> str:
    """The runner for the plan: Slurm's when in Slurm, "node" for --node-rank, else asked, else auto's choice."""
    if slurm:
        return "slurm"
    if node_rank is not None:
        return "node"
    if asked != "auto":
        return asked
    if not force_multi and len(nodes) == 1 and nodes[0].host in LOCAL_NAMES:
        return "local"
    found = [name for name in REMOTE_LAUNCHERS if name != "pdsh" or shutil.which("pdsh")]  # pdsh only if installed
    if not found:
        why = "--force-multi" if force_multi else f"the plan has remote hosts ({', '.join(n.host for n in nodes)}) and"
        raise DslaunchError(f"{why} needs a remote launcher ({', '.join(REMOTE_LAUNCHERS)}), and none is available")
    return found[0]


def pick_address(
    given: str | None,
    launcher: str,
    nodes: Sequence[NodePlan],
    *,
    remote: bool,
    ssh_config: str | None,
    environ: Mapping[str, str],
) -> str:
    """MASTER_ADDR: as given, else what the first node is called from where the ranks run."""
    if given:
        return given
    first = nodes[0].host
    if launcher == "local":
        return "127.0.0.1"  # every agent of a local run is on this machine
    if launcher == "slurm":
        from dslaunch.slurmlib import address

        return address.node_address(first, environ)
    if remote and launcher != "node":
        from dslaunch.runners.remote.sshconfig import resolve_address

        return resolve_address(first, ssh_config)
    if len(nodes) > 1 or first not in LOCAL_NAMES:
        return first.rpartition("@")[2]
    return "127.0.0.1"


def _rank_env(c: Choices, remote: bool, environ: Mapping[str, str]) -> tuple[dict[str, str], set[str]]:
    """Every rank's extra environment: config, logging, then exports (explicit over implicit)."""
    env: dict[str, str] = {}
    if c.core.config_path:
        env["DSLAUNCH_CONFIG"] = c.core.config_path
    env.update(c.logs.rank_env(c.core.log_dir))
    env.update(c.observe.rank_env())
    implicit = remote_options.implicit_env(environ) if remote else {}
    for name, value in implicit.items():
        env.setdefault(name, value)
    env.update(c.remote.explicit_env)
    exported = [*implicit.items(), *c.remote.explicit_env]
    return env, {value for name, value in exported if value and is_secret_name(name)}


def _check(c: Choices, launcher: str, nodes: Sequence[NodePlan], master_port: int) -> None:
    """Checks that need the whole plan."""
    node_rank = c.remote.node_rank
    if node_rank is not None:
        if node_rank >= len(nodes):
            raise DslaunchError(
                f"{node_rank} is not a node of this plan: valid node ranks are 0..{len(nodes) - 1}",
                option="--node-rank",
            )
        if master_port == 0:
            raise DslaunchError(
                "every node must agree on the port: give a fixed --master-port with --node-rank", option="--master-port"
            )
    if c.parity.bind_cores is not None:
        parity_options.check_core_list(
            c.parity.bind_cores,
            max(node.nproc for node in nodes),
            need_numactl=launcher in ("local", "node") and not c.core.dry_run,
        )
    if launcher in ("local", "slurm") and not c.core.dry_run and not c.remote.preflight:
        _check_target(c.core.program)


def _check_target(program: Program) -> None:
    """What the ranks run exists here (local and Slurm ranks run on a file system this one shares)."""
    target = program.target
    if program.module:
        return
    if not program.no_python:
        if not os.path.isfile(target):
            raise DslaunchError(f"script {target!r} does not exist (use -m for a module)", option="SCRIPT")
        return
    path = target if "/" in target else shutil.which(target)
    if path is None:
        raise DslaunchError(f"{target!r} is not a program on PATH (--no-python runs SCRIPT itself)", option="SCRIPT")
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        why = "does not exist" if not os.path.exists(path) else "is not an executable file"
        raise DslaunchError(f"{target!r} {why} (--no-python runs SCRIPT itself)", option="SCRIPT")
