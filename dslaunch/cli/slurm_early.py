"""Runs before core options: inside a Slurm allocation, host filters name Slurm nodes.

Core options would check ``--include/--exclude/--num-nodes`` against a
hostfile; in Slurm mode they are set aside here for ``slurm_options``.
"""

from __future__ import annotations

import os
from typing import Any

import click

from dslaunch.cli.draft import PlanDraft
from dslaunch.cli.slurm_options import FILTERS, slurm_context

PARAMS: list[click.Parameter] = []


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    if slurm_context(values, os.environ) is None:
        return
    values["slurm_filters"] = {name: values.get(name) for name in FILTERS}
    values.update(include="", exclude="", num_nodes=None)
