"""Runners: each takes a frozen :class:`~dslaunch.plan.LaunchPlan` and starts its node agents.

Runner modules are imported by name, only when chosen, so the CLI never
pays for paramiko or anything else a runner needs.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from dslaunch.plan import LaunchPlan
from dslaunch.runners.result import JobResult

# name -> "module:Class"; helpers of other issues add their runners here.
RUNNERS: dict[str, str] = {
    "local": "dslaunch.runners.local:LocalRunner",
    "slurm": "dslaunch.runners.slurm:SlurmRunner",
    "openmpi": "dslaunch.runners.mpi:OpenMpiRunner",
    "mpich": "dslaunch.runners.mpi:MpichRunner",
    "ssh": "dslaunch.runners.ssh:SshRunner",
    "pdsh": "dslaunch.runners.pdsh:PdshRunner",
    "node": "dslaunch.runners.node:NodeRunner",
}
# What --launcher accepts: "node" is chosen internally by --node-rank, never by name.
USER_LAUNCHERS: tuple[str, ...] = ("auto", *sorted(name for name in RUNNERS if name != "node"))


class Runner(Protocol):
    name: str

    def describe(self, plan: LaunchPlan) -> list[str]:
        """The commands this runner would run, secrets masked (for --dry-run)."""

    def run(self, plan: LaunchPlan) -> JobResult:
        """Run one attempt of the job: start it, supervise it, tear it down everywhere, and say how it ended."""


def get_runner(name: str) -> Runner:
    try:
        spec = RUNNERS[name]
    except KeyError:
        raise ValueError(f"unknown launcher {name!r}; known: {', '.join(sorted(RUNNERS))}") from None
    module_name, _, class_name = spec.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls()  # type: ignore[no-any-return]
