"""Which hosts an attempt runs on (pure): elastic node counts, spares and the hosts left out (docs/elastic.md).

A plan with candidates (``plan.elastic``) runs each attempt on the first ``nnodes_max`` candidates, in hostfile
order, that no earlier probe or attempt blamed; it cannot start below ``nnodes_min``. :func:`layout` lays the
ranks out again on the hosts chosen (WORLD_SIZE, ranks, slots, MASTER_ADDR) and checks the mesh against the
new world. ``job/attempts.py`` does the probing and the running.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from dslaunch.mesh import MeshConfigError, parse_spec, resolve
from dslaunch.plan import Elastic, LaunchPlan, NodePlan, assign_ranks

Quarantine = Mapping[str, str]  # host -> why it is left out, in the order it was blamed


def choose_hosts(elastic: Elastic, quarantine: Quarantine) -> tuple[str, ...]:
    """The first ``nnodes_max`` candidates not left out, in hostfile order (spares fill in for lost nodes)."""
    healthy = [c.host for c in elastic.candidates if c.host not in quarantine]
    return tuple(healthy[: elastic.nnodes_max])


def enough(elastic: Elastic, hosts: Sequence[str]) -> bool:
    return len(hosts) >= elastic.nnodes_min


def layout(plan: LaunchPlan, hosts: Sequence[str], master_addr: str) -> LaunchPlan:
    """``plan`` on ``hosts`` (candidates of it): ranks in host order, rendezvous at ``master_addr``.

    Raises :class:`MeshConfigError` when the plan's mesh (``DSLAUNCH_MESH``) cannot fit the new world.
    """
    by_host = {c.host: c for c in plan.elastic.candidates}
    nodes = assign_ranks({host: by_host[host].slots for host in hosts})
    world = sum(n.nproc for n in nodes)
    mesh = dict(plan.env).get("DSLAUNCH_MESH")
    if mesh is not None:
        try:
            resolve(parse_spec(mesh), world)
        except MeshConfigError as exc:
            raise MeshConfigError(f"{exc.message} (on {len(nodes)} node(s), {world} ranks: {named(hosts)})") from None
    return replace(plan, nodes=nodes, master_addr=master_addr)


def pods_layout(plan: LaunchPlan, node_rank: int, hosts: Sequence[str]) -> LaunchPlan:
    """An elastic pod job's attempt (one launcher per node): ``hosts`` by node rank, alike nodes with this node's
    slots, this pod being ``node_rank``. Raises :class:`MeshConfigError` when the mesh cannot fit the world."""
    slots = plan.nodes[0].slots
    size = len(slots)
    nodes = tuple(NodePlan(host, i, slots, tuple(range(i * size, (i + 1) * size))) for i, host in enumerate(hosts))
    _check_mesh(plan, len(nodes) * size, f"{len(nodes)} pod(s)")
    return replace(plan, nodes=nodes, manual_node=node_rank)


def _check_mesh(plan: LaunchPlan, world: int, where: str) -> None:
    mesh = dict(plan.env).get("DSLAUNCH_MESH")
    if mesh is not None:
        try:
            resolve(parse_spec(mesh), world)
        except MeshConfigError as exc:
            raise MeshConfigError(f"{exc.message} (on {where}, {world} ranks)") from None


def left_out_line(quarantine: Quarantine, hosts: Sequence[str]) -> str:
    """One line naming ``hosts`` (left out) and why."""
    return "dslaunch: left out: " + ", ".join(f"{h} ({quarantine[h]})" for h in hosts)


def shortfall(elastic: Elastic, quarantine: Quarantine, hosts: Sequence[str]) -> str:
    """Why an attempt cannot start on ``hosts``, fewer than ``nnodes_min``: each missing host and why."""
    need = elastic.nnodes_min
    asked = f"--nnodes {need}:{elastic.nnodes_max}" if need != elastic.nnodes_max else f"{need} node(s)"
    usable = named(hosts) or "none"
    lines = [f"dslaunch: cannot start: the job needs {asked} and only {len(hosts)} host(s) are usable ({usable})"]
    lines += [f"  {host}: {why}" for host, why in quarantine.items()]
    what = "spare host is" if need == elastic.nnodes_max else "host above the minimum is"
    lines.append(f"dslaunch: no {what} left; nothing was started (exit 255)")
    return "\n".join(lines)


SHOWN_HOSTS = 16  # hosts named in one line of the launcher's; the rest counted (16,384 pods: a 300 KB line each)


def named(hosts: Sequence[str], shown: int = SHOWN_HOSTS) -> str:
    """``hosts`` (or node ranks) for one line: all of them, or the first ``shown`` and how many more."""
    if len(hosts) <= shown:
        return ", ".join(hosts)
    return f"{', '.join(hosts[:shown])} and {len(hosts) - shown:,} more"
