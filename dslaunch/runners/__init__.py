"""Runners: each takes a frozen :class:`~dslaunch.plan.LaunchPlan` and starts its node agents.

Runner modules are imported by name, only when chosen, so the CLI never
pays for paramiko or anything else a runner needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.job.attempts import HostPool
    from dslaunch.job.protocols import Runner

# name -> "module:Class"; helpers of other issues add their runners here.
RUNNERS: dict[str, str] = {
    "local": "dslaunch.runners.local:LocalRunner",
    "slurm": "dslaunch.runners.slurm.runner:SlurmRunner",
    "openmpi": "dslaunch.runners.mpi:OpenMpiRunner",
    "mpich": "dslaunch.runners.mpi:MpichRunner",
    "ssh": "dslaunch.runners.ssh.runner:SshRunner",
    "pdsh": "dslaunch.runners.pdsh.runner:PdshRunner",
    "node": "dslaunch.runners.node:NodeRunner",
}
# What --launcher accepts: "node" is chosen internally by --node-rank, never by name.
USER_LAUNCHERS: tuple[str, ...] = ("auto", *sorted(name for name in RUNNERS if name != "node"))


def get_runner(name: str) -> Runner:
    try:
        spec = RUNNERS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}; known: {', '.join(sorted(RUNNERS))}") from None
    module_name, _, class_name = spec.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()  # type: ignore[no-any-return]


def host_pool(runner: Runner, plan: LaunchPlan) -> HostPool:
    """The hosts of each attempt, with the runner's probe (its own, else --preflight's through its
    ``run_on_nodes``) and its address lookup (``address_of``)."""
    from dslaunch.job.attempts import HostPool

    if not plan.elastic.candidates:  # one fixed set of hosts: nothing to probe (and no prober to import)
        return HostPool(plan)

    def probe(plan: LaunchPlan, hosts: list[str]) -> dict[str, str]:
        found = runner.probe(plan, hosts)
        if found is None:
            from dslaunch.runners.preflight import probe_hosts

            found = probe_hosts(plan, hosts, runner.run_on_nodes)
        return found

    return HostPool(plan, probe, runner.address_of)
