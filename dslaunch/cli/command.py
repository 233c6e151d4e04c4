"""The ``dslaunch`` click command: parse, decide, then act.

Each option area module exports ``PARAMS`` (click parameters) and ``parse``,
which checks its own options into a small frozen record; :mod:`dslaunch.cli.decide`
turns the records into the frozen plan; only then does anything change the world
(logging set-up, pid file, preflight, the launch). Every :class:`DslaunchError`
becomes a click usage error, exit 2, here and nowhere else.

Start-up: importing this module loads click and the option areas' ``PARAMS`` only, which is all ``--help``,
``--version`` and ``--report`` need; :mod:`dslaunch.cli.decide` (with the plan and every input parser) and what
acts on the plan are imported by :func:`_run`, once the options are read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from dslaunch import __version__
from dslaunch.cli import (
    core_options,
    deepspeed_flags,
    help_sections,
    log_options,
    mesh_options,
    observe_options,
    parity_options,
    pod_options,
    remote_options,
    restart_options,
    stop_options,
)
from dslaunch.cli.report_option import PARAMS as REPORT_PARAMS
from dslaunch.errors import DslaunchError

if TYPE_CHECKING:
    from dslaunch.cli.decide import Choices, Decision
    from dslaunch.observe.session import Observer
    from dslaunch.plan import LaunchPlan

# Option areas; --help lists their options by section (cli/help_sections.py), each area's in this order.
AREAS = (
    deepspeed_flags,
    core_options,
    restart_options,
    stop_options,
    log_options,
    remote_options,
    pod_options,
    parity_options,
    mesh_options,
    observe_options,
)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"dslaunch {__version__}")
        ctx.exit(0)


@contextmanager
def user_errors() -> Iterator[None]:
    """The one translation of user errors into click's (a one-line message, exit 2)."""
    try:
        yield
    except DslaunchError as exc:
        if exc.option:
            raise click.BadParameter(exc.message, param_hint=f"'{exc.option}'") from None
        raise click.UsageError(exc.message) from None


class DslaunchCommand(click.Command):
    """The command, with two steps before click reads any option (each a mechanism of its own, above click's),
    and its options listed in sections."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from dslaunch import nesting

        # A dslaunch run in a rank is a job of its own: it forgets what the enclosing job's launcher set in this
        # environment (DSLAUNCH_* and PET_* read as options, the run id) and the user did not change.
        nesting.forget_parent_job(os.environ)
        with user_errors():  # the option callbacks' errors too
            return super().parse_args(ctx, deepspeed_flags.expand_abbreviations(args, self.params))

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        help_sections.format_sections(ctx, formatter, self.get_params(ctx))


def choices_of(values: dict[str, Any], environ: Mapping[str, str]) -> Choices:
    """Parse every area's options (``values`` is click's, DeepSpeed spellings translated in place)."""
    from dslaunch.cli.decide import Choices

    deepspeed_flags.translate(values)
    core = core_options.parse(values)
    return Choices(
        core=core,
        logs=log_options.parse(values, core.config, environ),
        remote=remote_options.parse(values, environ),
        parity=parity_options.parse(values),
        mesh=mesh_options.parse(values, core.config),
        restarts=restart_options.parse(values),
        no_restart_on=restart_options.no_restart_on(values),
        stop=stop_options.parse(values),
        pods=pod_options.parse(values),
        observe=observe_options.parse(values, core.log_dir, core.config),
    )


def decided(choices: Choices) -> Decision:
    """The frozen plan for ``choices``; its warnings go to stderr, once."""
    from dslaunch.cli.decide import decide

    decision = decide(choices, os.environ)
    for warning in decision.warnings:
        click.echo(warning, err=True)
    return decision


def _run(**values: Any) -> None:
    if values.get("script") is None and not values.get("preflight"):
        raise click.UsageError("Missing argument 'SCRIPT'.")
    with user_errors():
        choices = choices_of(values, os.environ)
        code = _act(choices, decided(choices))
    sys.stdout.flush()
    click.get_current_context().exit(code)


def _act(choices: Choices, decision: Decision) -> int:
    """Everything with an effect, in order, once the plan is frozen."""
    plan, core = decision.plan, choices.core
    log_options.configure(choices.logs, plan, dry_run=core.dry_run)
    from dslaunch.runners import get_runner, host_pool

    runner = get_runner(plan.launcher)
    if choices.remote.preflight:
        from dslaunch.runners.preflight import run_preflight

        code, report = run_preflight(plan, runner)
        click.echo(report)
        return code
    if core.dry_run:
        _dry_run(plan, runner.describe(plan), decision.secrets, as_json=core.json)
        return 0
    if choices.parity.save_pid:
        parity_options.write_pid_file(choices.parity.save_pid)
    log_options.log_launch(plan.launcher, runner.describe(plan), plan.env, decision.secrets)
    from dslaunch.job.attempts import run_attempts

    with _observed(choices, plan) as observer:
        return run_attempts(runner, plan, host_pool(runner, plan), observer)


@contextmanager
def _observed(choices: Choices, plan: LaunchPlan) -> Iterator[Observer | None]:
    """The job's observer (docs/observability.md), for the job's attempts; None where nothing is to be seen."""
    if not choices.observe.collect:
        yield None
        return
    from dslaunch.observe import session

    try:
        observer = session.start(choices.observe, plan)
    except OSError as exc:
        raise DslaunchError(f"cannot serve metrics: {exc.strerror or exc}", option="--metrics-port") from None
    try:
        yield observer
    finally:
        if observer is not None:
            observer.close()


def _dry_run(plan: LaunchPlan, commands: list[str], secrets: frozenset[str], *, as_json: bool) -> None:
    if as_json:
        import json

        from dslaunch import masking

        data = plan.summary()
        data["commands"] = [masking.mask(c, secrets) for c in commands]
        data["env"] = {k: masking.mask_value(k, v, secrets) for k, v in plan.env}
        click.echo(json.dumps(data, indent=2))
    else:
        from dslaunch.cli import plan_text

        click.echo(plan_text.plan_text(plan, commands, secrets))


def build_command() -> click.Command:
    params: list[click.Parameter] = []
    for area in AREAS:
        params.extend(area.PARAMS)
    params += REPORT_PARAMS  # after --dry-run and --preflight in its section, as it is used less
    params.append(
        help_sections.Option(
            ["--version"],
            section=help_sections.JOB,
            is_flag=True,
            expose_value=False,
            is_eager=True,
            callback=_version,
            help="Show the version and exit.",
        )
    )
    for param in params:  # every visible option also from DSLAUNCH_<NAME>, shown in --help
        if isinstance(param, click.Option):
            # DSLAUNCH_LOG_LEVEL is merged key by key under --log-level (log_options.merged_spec), not replaced
            param.allow_from_autoenv = not param.hidden and param.name not in ("version", "report", "log_level")
            param.show_envvar = param.allow_from_autoenv
    params += [
        click.Argument(["script"], metavar="SCRIPT", required=False),  # optional only for --preflight
        click.Argument(["script_args"], nargs=-1, type=click.UNPROCESSED, metavar="[SCRIPT_ARGS]..."),
    ]
    return DslaunchCommand(
        "dslaunch",
        params=params,
        callback=_run,
        help="Start the ranks of a PyTorch job on this machine or many, and stop all of them "
        "the moment one fails.\n\nOptions go before SCRIPT; everything after SCRIPT is passed to it untouched.",
        context_settings={
            "auto_envvar_prefix": "DSLAUNCH",
            "allow_interspersed_args": False,
            "help_option_names": ["-h", "--help"],
            "max_content_width": 110,
        },
    )
