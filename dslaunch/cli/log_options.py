"""Logging options: one spec for every process of the job (launcher, agents, ranks).

The spec is merged key by key, ``--log-level`` over ``DSLAUNCH_LOG_LEVEL`` over the
config's ``log_level``, validated here (exit 2) and exported to every rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from dslaunch.cli.draft import PlanDraft
from dslaunch.config import ConfigError, steps_per_print
from dslaunch.logs import spec as S


def _level_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing:
        return value
    if value.strip().lower() in ("help", "+help"):
        click.echo(S.help_text())
        ctx.exit(0)
    try:
        S.parse_spec(value)
    except S.SpecError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None
    return value


def _ranks_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    try:
        return S.parse_ranks(value).canonical()
    except S.SpecError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


PARAMS: list[click.Parameter] = [
    click.Option(
        ["--log-level", "log_level"],
        metavar="SPEC",
        is_eager=True,
        callback=_level_option,
        help="Log levels, e.g. 'info', 'comm=debug', 'warning,comm=debug,launcher=info', '+comm,-agent'; "
        "'help' lists the modules [default: warning; env DSLAUNCH_LOG_LEVEL; config log_level].",
    ),
    click.Option(
        ["--log-format"],
        type=click.Choice(["console", "json"], case_sensitive=False),
        default="console",
        envvar="DSLAUNCH_LOG_FORMAT",
        show_default=True,
        help="Console records as text or one JSON object per line.",
    ),
    click.Option(
        ["--log-ranks"],
        metavar="SPEC",
        default="0",
        envvar="DSLAUNCH_LOG_RANKS",
        callback=_ranks_option,
        show_default=True,
        help="Ranks whose records below WARNING reach the console: 'all', 'none', '0,8-15', "
        "'local:0' (local rank 0 of each node), 'node:0'.",
    ),
    click.Option(
        ["--log-color"],
        type=click.Choice(["auto", "always", "never"], case_sensitive=False),
        default="auto",
        show_default=True,
        help="Colour console records (auto: stdout is a terminal; honours NO_COLOR, FORCE_COLOR).",
    ),
    click.Option(
        ["--wall-clock-breakdown"],
        is_flag=True,
        default=None,
        help="Print the timers' wall-clock breakdown at any log level [config: wall_clock_breakdown].",
    ),
]


def merged_spec(cli: str | None, env_text: str | None, config: dict[str, Any]) -> S.LogSpec:
    """CLI over env over config, per key; raises click errors naming the source."""
    spec = S.LogSpec()
    value = config.get("log_level")
    if value is not None:
        if not isinstance(value, str):
            raise click.BadParameter(
                f"config key log_level must be a string spec like 'info', not {value!r}", param_hint="'--config'"
            )
        try:
            spec = S.parse_spec(value).merged_over(spec)
        except S.SpecError as exc:
            raise click.BadParameter(f"config key log_level: {exc}", param_hint="'--config'") from None
    if env_text and env_text.strip():
        try:
            spec = S.parse_spec(env_text).merged_over(spec)
        except S.SpecError as exc:
            raise click.UsageError(f"environment DSLAUNCH_LOG_LEVEL={env_text!r}: {exc}") from None
    if cli is not None:
        spec = S.parse_spec(cli).merged_over(spec)  # validated by the option callback
    return spec


def _config_switches(config: dict[str, Any], wall_clock: bool | None) -> dict[str, bool]:
    comms = config.get("comms_logger")
    return {
        "wall_clock_breakdown": bool(config.get("wall_clock_breakdown")) if wall_clock is None else wall_clock,
        "comms_logger": bool(comms.get("enabled")) if isinstance(comms, dict) else bool(comms),
    }


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    spec = merged_spec(values.get("log_level"), os.environ.get("DSLAUNCH_LOG_LEVEL"), draft.config)
    fmt = (values.get("log_format") or "console").lower()
    color = S.decide_color((values.get("log_color") or "auto").lower(), sys.stdout.isatty(), os.environ)
    switches = _config_switches(draft.config, values.get("wall_clock_breakdown"))
    try:
        every = steps_per_print(draft.config)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="'--config'") from None
    draft.env["DSLAUNCH_LOG_LEVEL"] = spec.canonical()
    draft.env["DSLAUNCH_LOG_FORMAT"] = fmt
    draft.env["DSLAUNCH_LOG_COLOR"] = "1" if color else "0"
    draft.env["DSLAUNCH_LOG_RANKS"] = values.get("log_ranks") or "0"
    if draft.log_dir:
        draft.env["DSLAUNCH_LOG_DIR"] = draft.log_dir
    for switch, on in switches.items():
        if on:
            draft.env[f"DSLAUNCH_{switch.upper()}"] = "1"
    if every is not None:
        draft.env["DSLAUNCH_STEPS_PER_PRINT"] = str(every)

    from dslaunch.logs import _core

    _core.configure(
        spec,
        role="launcher",
        fmt=fmt,
        color=color,
        log_dir=None if draft.dry_run else draft.log_dir,
        facts={"run_id": draft.run_id},
    )
    log = _core.get_logger("launcher")
    if log.is_enabled_for(S.INFO):
        log.info(
            "hosts chosen",
            nodes=[f"{n.host}:{','.join(n.slots)}" for n in draft.nodes],
            ranks=sum(len(n.ranks) for n in draft.nodes),
            log_spec=spec.canonical(),
        )


def log_launch(launcher: str, commands: Sequence[str], env: Sequence[tuple[str, str]], secrets: set[str]) -> None:
    """The launcher's record of what it runs (secrets masked)."""
    from dslaunch import masking
    from dslaunch.logs import _core

    log = _core.get_logger(f"runner.{launcher}" if launcher.isidentifier() else "runner")
    if log.is_enabled_for(S.INFO):
        for command in commands:
            log.info("command", command=masking.mask(command, secrets))
    if log.is_enabled_for(S.DEBUG):
        log.debug("rank environment", env={k: masking.mask_value(k, v, secrets) for k, v in env})
