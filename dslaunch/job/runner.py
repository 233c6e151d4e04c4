"""What a runner is to the job core: the protocol every transport implements (``dslaunch/runners/``)."""

from __future__ import annotations

from typing import Protocol

from dslaunch.job.result import JobResult
from dslaunch.plan import LaunchPlan


class Runner(Protocol):
    name: str

    def describe(self, plan: LaunchPlan) -> list[str]:
        """The commands this runner would run, secrets masked (for --dry-run)."""

    def run(self, plan: LaunchPlan) -> JobResult:
        """Run one attempt of the job: start it, supervise it, tear it down everywhere, and say how it ended."""
