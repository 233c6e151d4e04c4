"""The ``dslaunch`` click command, assembled from option areas.

Each area module exports ``PARAMS`` (click parameters) and
``contribute(values, draft)``, which adds its part to the plan draft.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

import click

from dslaunch import __version__, masking
from dslaunch.cli import render
from dslaunch.cli.draft import PlanDraft
from dslaunch.plan import LaunchPlan

# Option areas, in the order they contribute to the plan.
AREAS: tuple[str, ...] = (
    "dslaunch.cli.ds_compat",
    "dslaunch.cli.slurm_early",
    "dslaunch.cli.core_options",
    "dslaunch.cli.slurm_options",
    "dslaunch.cli.log_options",
    "dslaunch.cli.remote_options",
    "dslaunch.cli.parity_options",
    "dslaunch.cli.mesh_options",
)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"dslaunch {__version__}")
        ctx.exit(0)


def choose_launcher(draft: PlanDraft) -> str:
    """Resolve ``--launcher auto`` and check an explicit choice exists."""
    from dslaunch.cli.core_options import LOCAL_NAMES
    from dslaunch.runners import RUNNERS

    name = draft.launcher
    if name == "auto":
        if len(draft.nodes) == 1 and draft.nodes[0].host in LOCAL_NAMES:
            return "local"
        from shutil import which

        for candidate in ("pdsh", "ssh"):  # pdsh only when installed
            if candidate in RUNNERS and (candidate != "pdsh" or which("pdsh")):
                return candidate
        raise click.UsageError(
            f"the plan has remote hosts ({', '.join(n.host for n in draft.nodes)}) but no remote launcher "
            f"is available; known launchers: {', '.join(sorted(RUNNERS))}"
        )
    if name not in RUNNERS:
        raise click.BadParameter(
            f"unknown launcher {name!r}; known: auto, {', '.join(sorted(RUNNERS))}", param_hint="'--launcher'"
        )
    return name


def _run(**values: Any) -> None:
    if values.get("script") is None and not values.get("preflight"):
        raise click.UsageError("Missing argument 'SCRIPT'.")
    draft = PlanDraft()
    for area in AREAS:
        importlib.import_module(area).contribute(values, draft)
    draft.launcher = choose_launcher(draft)
    if draft.launcher == "local":
        if not values.get("master_addr"):
            draft.master_addr = "127.0.0.1"  # every agent of a local run is on this machine
        if not draft.dry_run:
            _check_target(draft)
            if draft.master_port == 0:
                draft.master_port = _free_port(draft.master_addr)
    plan = draft.freeze()
    from dslaunch.runners import get_runner

    runner = get_runner(plan.launcher)
    if draft.dry_run:
        _dry_run(plan, runner.describe(plan), draft)
        return
    from dslaunch.cli.log_options import log_launch

    log_launch(plan.launcher, runner.describe(plan), plan.env, draft.secrets)
    code = runner.run(plan)
    sys.stdout.flush()
    click.get_current_context().exit(code)


def _free_port(addr: str) -> int:
    from dslaunch.runners.local import free_port

    try:
        return free_port(addr)
    except OSError as exc:
        raise click.BadParameter(f"cannot pick a free port on {addr!r}: {exc}", param_hint="'--master-addr'") from None


def _check_target(draft: PlanDraft) -> None:
    program = draft.program
    assert program is not None
    if program.module or program.no_python:
        return
    if not os.path.isfile(program.target):
        raise click.BadParameter(
            f"script {program.target!r} does not exist (use -m for a module)", param_hint="'SCRIPT'"
        )


def _dry_run(plan: LaunchPlan, commands: list[str], draft: PlanDraft) -> None:
    if draft.json:
        data = plan.summary()
        data["commands"] = [masking.mask(c, draft.secrets) for c in commands]
        data["env"] = {k: masking.mask_value(k, v, draft.secrets) for k, v in plan.env}
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(render.plan_text(plan, commands, draft.secrets))


def build_command() -> click.Command:
    params: list[click.Parameter] = [
        click.Option(
            ["--version"],
            is_flag=True,
            expose_value=False,
            is_eager=True,
            callback=_version,
            help="Show the version and exit.",
        ),
    ]
    for area in AREAS:
        params.extend(importlib.import_module(area).PARAMS)
    params += [
        click.Argument(["script"], metavar="SCRIPT", required=False),  # optional only for --preflight
        click.Argument(["script_args"], nargs=-1, type=click.UNPROCESSED, metavar="[SCRIPT_ARGS]..."),
    ]
    return click.Command(
        "dslaunch",
        params=params,
        callback=_run,
        help="Start the ranks of a PyTorch job on this machine or many, and stop all of them "
        "the moment one fails.\n\nOptions go before SCRIPT; everything after SCRIPT is passed to it untouched.",
        context_settings={
            "allow_interspersed_args": False,
            "help_option_names": ["-h", "--help"],
            "max_content_width": 110,
        },
    )
