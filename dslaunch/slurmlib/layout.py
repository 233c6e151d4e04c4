"""Where this process sits in Slurm: allocation, step, task layout (pure, from an env mapping)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from dslaunch.errors import DslaunchError
from dslaunch.limits import MAX_SLOTS_PER_HOST, MAX_WORLD_SIZE, ascii_int
from dslaunch.plan import NodePlan
from dslaunch.slurmlib import hostlist

# MASTER_PORT derived from the job and step id lies in [PORT_BASE, PORT_BASE + PORT_SPAN):
# above the usual service ports and below Linux's ephemeral range (32768+). It is always even: the port above it is
# the step's stop channel (runners/slurm/stop_channel.py), never another step's store.
PORT_BASE = 20000
PORT_SPAN = 12000
_STEPS_PER_JOB = 16


class SlurmLayoutError(DslaunchError):
    pass


@dataclass(frozen=True)
class SlurmStep:
    """The facts a task of a running step reads from ``SLURM_*``."""

    job_id: int
    step_id: int
    procid: int
    localid: int
    nodeid: int
    ntasks: int
    hosts: tuple[str, ...]  # the step's nodes, in Slurm's node order
    tasks_per_node: tuple[int, ...]  # one count per node of the step
    nodename: str | None

    @property
    def nnodes(self) -> int:
        return len(self.hosts)

    @property
    def uniform_tasks(self) -> int | None:
        """Tasks per node when every node has the same count, else None."""
        return self.tasks_per_node[0] if len(set(self.tasks_per_node)) == 1 else None


def in_allocation(env: Mapping[str, str]) -> bool:
    return bool(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"))


def in_step(env: Mapping[str, str]) -> bool:
    """Inside a task of an srun step (a batch script has SLURM_PROCID but no step id)."""
    return in_allocation(env) and "SLURM_PROCID" in env and _step_id_text(env) is not None


def _step_id_text(env: Mapping[str, str]) -> str | None:
    return env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")


def _int(env: Mapping[str, str], *names: str) -> int:
    for name in names:
        value = env.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                raise SlurmLayoutError(f"{name}={value!r} is not a whole number") from None
    raise SlurmLayoutError(f"{names[0]} is not set: is this really inside a Slurm step?")


_TPN = re.compile(r"^([0-9]+)(?:\(x([0-9]+)\))?$")


def parse_tasks_per_node(text: str) -> tuple[int, ...]:
    """``2(x3),1`` -> (2, 2, 2, 1): Slurm's compressed per-node task counts."""
    counts: list[int] = []
    for item in text.split(","):
        match = _TPN.match(item.strip())
        if match is None:
            raise SlurmLayoutError(f"cannot read tasks per node {text!r} (expected e.g. '2(x3),1')")
        tasks, repeat = int(match.group(1)), int(match.group(2) or 1)
        if tasks > MAX_SLOTS_PER_HOST or len(counts) + repeat > MAX_WORLD_SIZE:
            raise SlurmLayoutError(f"tasks per node {text!r} is more than this launcher can place")
        counts.extend([tasks] * repeat)
    return tuple(counts)


def job_hosts(env: Mapping[str, str]) -> tuple[str, ...]:
    text = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    if not text:
        raise SlurmLayoutError("SLURM_JOB_NODELIST is not set: is this inside a Slurm allocation?")
    return _expand(text, "SLURM_JOB_NODELIST")


def _expand(text: str, name: str) -> tuple[str, ...]:
    try:
        return hostlist.expand(text)
    except hostlist.HostlistError as exc:
        raise SlurmLayoutError(f"{name}: {exc}") from None


def read_step(env: Mapping[str, str]) -> SlurmStep:
    step_text = _step_id_text(env) or "0"
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or ""
    hosts = _expand(nodelist, "SLURM_STEP_NODELIST") if nodelist else ()
    if not hosts:
        raise SlurmLayoutError("SLURM_STEP_NODELIST is not set: is this really inside a Slurm step?")
    tpn_text = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    ntasks = _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
    tasks_per_node = parse_tasks_per_node(tpn_text) if tpn_text else (ntasks // len(hosts),) * len(hosts)
    if len(tasks_per_node) != len(hosts) or sum(tasks_per_node) != ntasks:
        raise SlurmLayoutError(
            f"Slurm's layout does not add up: {len(hosts)} nodes ({nodelist}), tasks per node {tpn_text}, "
            f"{ntasks} tasks"
        )
    step = SlurmStep(
        job_id=_int(env, "SLURM_JOB_ID", "SLURM_JOBID"),
        step_id=ascii_int(step_text) or 0,
        procid=_int(env, "SLURM_PROCID"),
        localid=_int(env, "SLURM_LOCALID"),
        nodeid=_int(env, "SLURM_NODEID"),
        ntasks=ntasks,
        hosts=hosts,
        tasks_per_node=tasks_per_node,
        nodename=env.get("SLURMD_NODENAME"),
    )
    if not 0 <= step.nodeid < step.nnodes or not 0 <= step.procid < ntasks:
        raise SlurmLayoutError(f"SLURM_NODEID={step.nodeid}/SLURM_PROCID={step.procid} lie outside the step")
    return step


def slurm_signals_ranks(env: Mapping[str, str]) -> bool:
    """Whether Slurm signals every rank itself (plan ``slurm.signals_ranks``, read by the node agent).

    Slurm (proctrack cgroup or linuxproc) already delivers USR1/USR2 to every process of a step,
    so relaying them would signal each rank twice. DSLAUNCH_SLURM_FORWARD_SIGNALS=1 turns relaying
    back on, for proctrack/pgid, which signals only the task's process group (the ranks run in
    sessions of their own).
    """
    return env.get("DSLAUNCH_SLURM_FORWARD_SIGNALS", "0") in ("", "0")


def derive_port(job_id: int, step_id: int = 0) -> int:
    """A port every task of one step computes alike, even (:func:`stop_channel_port` is the next one); distinct for
    375 consecutive job ids x 16 steps."""
    return PORT_BASE + 2 * ((job_id * _STEPS_PER_JOB + step_id % _STEPS_PER_JOB) % (PORT_SPAN // 2))


def stop_channel_port(master_port: int) -> int:
    """Where node 0's task listens for the other tasks' stop steps (runners/slurm/stop_channel.py): the store's port
    + 1, as a pod's coordinator listens (docs/stopping.md)."""
    return master_port + 1 if master_port < 65535 else master_port - 1


_FALLBACK_STRIDE = 2 * 1999  # two steps' channels 1999 slots apart share no fallback with each other's first port


def stop_channel_ports(master_port: int) -> tuple[int, int, int]:
    """:func:`stop_channel_port`, then two more where it is held by another process (CI: a port taken for over 5 s,
    the nodes then decided alone): node 0's task listens on the first it can bind, the others try each in turn,
    and the handshake under the job's secret tells node 0's task from whatever else holds one."""
    first = stop_channel_port(master_port)
    offset = first - PORT_BASE - 1
    return (first, _in_span(offset + _FALLBACK_STRIDE), _in_span(offset + 2 * _FALLBACK_STRIDE))


def _in_span(offset: int) -> int:
    return PORT_BASE + 1 + offset % PORT_SPAN


def step_mode(step: SlurmStep, nproc: int | str | None) -> str:
    """``"node"`` (this task is its node's agent) or ``"rank"`` (this task is one rank).

    Refuses layouts that would start ranks twice or leave the rank count ambiguous.
    """
    tasks = step.uniform_tasks
    if tasks is None:
        counts = ",".join(str(c) for c in step.tasks_per_node)
        raise SlurmLayoutError(
            f"srun started a different number of tasks on each node ({counts}), so dslaunch cannot tell whether "
            "each task is a node or a rank. Use 'srun --ntasks-per-node=1 dslaunch --nproc-per-node N ...' "
            "(dslaunch starts the ranks) or 'srun --ntasks-per-node=N dslaunch ...' (each task is a rank)."
        )
    if tasks == 1:
        return "node"
    if nproc is not None and nproc != 1:
        raise SlurmLayoutError(
            f"srun started {tasks} tasks per node and --nproc-per-node {nproc} would start {nproc} ranks in each "
            f"of them ({tasks} x {nproc} processes per node: a double spawn). Use either "
            f"'srun --ntasks-per-node=1 dslaunch --nproc-per-node {nproc} ...' (dslaunch starts the ranks) or "
            f"'srun --ntasks-per-node={tasks} dslaunch ...' without --nproc-per-node (each task is a rank)."
        )
    return "rank"


def rank_nodes(hosts: tuple[str, ...], slots: tuple[str, ...]) -> tuple[NodePlan, ...]:
    """Every host gets the same slots; ranks are numbered node by node."""
    n = len(slots)
    return tuple(NodePlan(h, i, slots, tuple(range(i * n, (i + 1) * n))) for i, h in enumerate(hosts))
