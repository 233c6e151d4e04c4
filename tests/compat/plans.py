"""Build the frozen launch plan in-process, exactly as the CLI does up to the runner."""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from typing import Any

from dslaunch.cli import command
from dslaunch.cli.draft import PlanDraft
from dslaunch.plan import LaunchPlan


def plan_of(args: Sequence[str]) -> LaunchPlan:
    """The plan ``dslaunch ARGS`` would run (click errors propagate as click exceptions)."""
    cmd = command.build_command()
    with cmd.make_context("dslaunch", list(args)) as ctx:
        values: dict[str, Any] = dict(ctx.params)
        draft = PlanDraft()
        for area in command.AREAS:
            importlib.import_module(area).contribute(values, draft)
        draft.launcher = command.choose_launcher(draft)
        return draft.freeze()


def comparable(plan: LaunchPlan) -> dict[str, Any]:
    """Everything in the plan but the random run id."""
    data = json.loads(plan.to_json())
    data.pop("run_id")
    return data
