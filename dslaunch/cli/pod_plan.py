"""What one launcher per pod plans (no hostfile: ``--nnodes N --node-rank R``, or an elastic ``MIN:MAX``): its
nodes, its ports, where the pods meet (``dslaunch/pods/``, docs/kubernetes.md). Called by ``cli/decide.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from dslaunch.cli.core_options import CoreChoices, resource_pool
from dslaunch.cli.mesh_options import MeshChoice
from dslaunch.cli.pod_options import DEFAULT_JOIN_TIMEOUT, PodChoices
from dslaunch.cli.remote_options import RemoteChoices
from dslaunch.errors import DslaunchError
from dslaunch.plan import NodePlan, PodSettings


class Choices(Protocol):
    """What is read here of ``decide.Choices`` (named by its parts: decide imports this module)."""

    @property
    def core(self) -> CoreChoices: ...
    @property
    def remote(self) -> RemoteChoices: ...
    @property
    def pods(self) -> PodChoices | None: ...


def elastic_range(c: Choices) -> tuple[int, int] | None:
    """(MIN, MAX) of an elastic pod job: one launcher per node without a hostfile, and --nnodes MIN:MAX, or N with
    --rdzv-backend c10d and no --node-rank (torchrun's c10d shape, where the rendezvous gives the node ranks)."""
    given = c.core.nnodes_range
    if given is None or c.core.pool is not None or given[1] < 2:
        return None
    c10d = c.pods is not None and c.pods.backend == "c10d"
    if given[0] == given[1] and not (c10d and c.remote.node_rank is None):
        return None
    return given


def pod_nodes(c: Choices, environ: Mapping[str, str]) -> tuple[NodePlan, ...]:
    """torchrun's one launcher per node (``--nnodes N --node-rank R``, or PET_*): N alike nodes, this one is R."""
    import socket

    core, node_rank = c.core, c.remote.node_rank
    if core.pool is not None or core.include or core.exclude or core.num_nodes is not None:
        raise DslaunchError(
            "--nnodes starts one node of N, without a hostfile (as torchrun); with -H the hostfile lists the "
            "nodes: use --num-nodes, --include or --exclude there",
            option="--nnodes",
        )
    if node_rank is None:
        raise DslaunchError(f"--nnodes {core.nnodes} starts one node: give its --node-rank (or PET_NODE_RANK)")
    if not core.master_addr:
        raise DslaunchError(
            f"--nnodes {core.nnodes}: give --master-addr (or PET_MASTER_ADDR), the address of node 0",
            option="--master-addr",
        )
    slots = next(iter(resource_pool(core, environ).values()))
    assert core.nnodes is not None
    hosts = [socket.gethostname() if i == node_rank else f"node{i}" for i in range(core.nnodes)]
    size = len(slots)
    return tuple(NodePlan(host, i, slots, tuple(range(i * size, (i + 1) * size))) for i, host in enumerate(hosts))


def elastic_pod_nodes(c: Choices, pod_range: tuple[int, int], environ: Mapping[str, str]) -> tuple[NodePlan, ...]:
    """Up to MAX alike pods, this one first: the coordinator lays each attempt out again (job.elastic.pods_layout)."""
    import socket

    core = c.core
    if not core.master_addr and (c.pods is None or c.pods.endpoint is None):
        raise DslaunchError(
            f"--nnodes {pod_range[0]}:{pod_range[1]} without a hostfile is one launcher per pod: give "
            "--rdzv-endpoint HOST[:PORT] (or PET_RDZV_ENDPOINT), where the pods meet, or --master-addr; or give "
            "-H HOSTFILE listing the candidate hosts (one dslaunch starts them all)",
            option="--nnodes",
        )
    if core.include or core.exclude or core.num_nodes is not None:
        raise DslaunchError("--include, --exclude and --num-nodes need a hostfile", option="--nnodes")
    slots = next(iter(resource_pool(core, environ).values()))
    hosts = [socket.gethostname(), *(f"pod{i}" for i in range(1, pod_range[1]))]
    size = len(slots)
    return tuple(NodePlan(host, i, slots, tuple(range(i * size, (i + 1) * size))) for i, host in enumerate(hosts))


def pods_port(c: Choices, master_port: int) -> int:
    """MASTER_PORT of a pod job: not the control port (torchrun's c10d serves both on one port; here rank 0's
    rendezvous moves to the next port when --master-port was not given), and fixed, as every pod must agree."""
    endpoint = c.pods.endpoint if c.pods is not None and c.core.pool is None else None
    if endpoint is not None and endpoint[1] == master_port:
        if c.core.port_given:
            raise DslaunchError(
                f"--master-port {master_port} is also --rdzv-endpoint's port, where the pods' control channel "
                "listens: give them different ports, or leave --master-port out (it then takes the next port)",
                option="--master-port",
            )
        return master_port + 1
    if master_port == 0 and c.core.pool is None:
        raise DslaunchError(
            "every pod must agree on the port: give a fixed --master-port (or PET_MASTER_PORT)", option="--master-port"
        )
    return master_port


def pod_settings(
    pods: PodChoices | None, master_addr: str, master_port: int, pod_range: tuple[int, int] | None
) -> PodSettings:
    """Where the coordinating launcher meets the other pods: --rdzv-endpoint, else the port after --master-port;
    and for an elastic pod job its node range."""
    pods = pods or PodChoices(None, "static", DEFAULT_JOIN_TIMEOUT)
    low, high = pod_range or (0, 0)
    if pods.endpoint is not None:
        return PodSettings(pods.endpoint[0], pods.endpoint[1], pods.join_timeout, low, high, pods.last_call)
    if master_port >= 65535:
        raise DslaunchError(
            f"--master-port {master_port}: the pods' control channel takes the next port; give a lower "
            "--master-port or an --rdzv-endpoint HOST:PORT",
            option="--master-port",
        )
    return PodSettings(master_addr, master_port + 1, pods.join_timeout, low, high, pods.last_call)


def mesh_nodes(
    mesh: MeshChoice, nodes: tuple[NodePlan, ...], pod_range: tuple[int, int] | None
) -> tuple[NodePlan, ...]:
    """The nodes to check the mesh on: all of them; of an elastic pod job the most pods whose world it fits (each
    attempt is checked again on the pods it has), or all when none fits (the error names the plan's MAX)."""
    if pod_range is None:
        return nodes
    from dslaunch.mesh import MeshConfigError, resolve

    for count in range(pod_range[1], pod_range[0] - 1, -1):
        try:
            resolve(mesh.spec, sum(n.nproc for n in nodes[:count]))
        except MeshConfigError:
            continue
        return nodes[:count]
    return nodes
