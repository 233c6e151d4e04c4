"""A mutable plan under construction; each option area adds to it, then it is frozen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dslaunch.plan import LaunchPlan, NodePlan, Program


@dataclass
class PlanDraft:
    launcher: str = "auto"
    run_id: str = ""
    nodes: tuple[NodePlan, ...] = ()
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    program: Program | None = None
    shutdown_timeout: float = 5.0
    log_dir: str | None = None
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    runner_options: dict[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    json: bool = False
    # The parsed --config file (empty without one), for areas that read its keys.
    config: dict[str, Any] = field(default_factory=dict)
    # Secret values to mask wherever a command or env is printed.
    secrets: set[str] = field(default_factory=set)

    def freeze(self) -> LaunchPlan:
        assert self.program is not None, "core options always set the program"
        return LaunchPlan(
            launcher=self.launcher,
            run_id=self.run_id,
            nodes=self.nodes,
            master_addr=self.master_addr,
            master_port=self.master_port,
            program=self.program,
            shutdown_timeout=self.shutdown_timeout,
            log_dir=self.log_dir,
            cwd=self.cwd,
            env=tuple(sorted(self.env.items())),
            runner_options=tuple(sorted(self.runner_options.items())),
        )
