"""Build the frozen launch plan in-process, exactly as the CLI does up to the runner."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from dslaunch.cli import command
from dslaunch.plan import LaunchPlan


def plan_of(args: Sequence[str]) -> LaunchPlan:
    """The plan ``dslaunch ARGS`` would run (user errors propagate as click exceptions)."""
    cmd = command.build_command()
    with cmd.make_context("dslaunch", list(args)) as ctx, command.user_errors():
        return command.decided(command.choices_of(dict(ctx.params), os.environ)).plan


def comparable(plan: LaunchPlan) -> dict[str, Any]:
    """Everything in the plan but the random run id."""
    data = json.loads(plan.to_json())
    data.pop("run_id")
    return data
