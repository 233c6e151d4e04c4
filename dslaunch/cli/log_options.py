"""Logging options: one spec for every process of the job (launcher, agents, ranks).

The spec is merged key by key, ``--log-level`` over ``DSLAUNCH_LOG_LEVEL`` over the
config's ``log_level``, validated here (exit 2) and exported to every rank.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from dslaunch.cli.help_sections import OUTPUT, Option
from dslaunch.errors import DslaunchError

if TYPE_CHECKING:  # imported where used: --help only needs PARAMS
    from dslaunch.logs import spec as S
    from dslaunch.plan import LaunchPlan


# The callbacks' user errors propagate: the command's parsing is inside command.user_errors().
def _level_option(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None or ctx.resilient_parsing:
        return value
    from dslaunch.logs import spec as S

    if value.strip().lower() in ("help", "+help"):
        click.echo(S.help_text())
        ctx.exit(0)
    try:
        S.parse_spec(value)
    except S.SpecError as exc:
        raise DslaunchError(exc.message, option="--log-level") from None
    return value


def _ranks_option(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from dslaunch.logs import spec as S

    try:
        return S.parse_ranks(value).canonical()
    except S.SpecError as exc:
        raise DslaunchError(exc.message, option="--log-ranks") from None


PARAMS: list[click.Parameter] = [
    Option(
        ["--log-level", "log_level"],
        section=OUTPUT,
        metavar="SPEC",
        is_eager=True,
        callback=_level_option,
        help="Log levels, e.g. 'info', 'comm=debug', 'warning,comm=debug,launcher=info', '+comm,-agent'; "
        "'help' lists the modules [default: warning; env DSLAUNCH_LOG_LEVEL; config log_level].",
    ),
    Option(
        ["--log-format"],
        section=OUTPUT,
        type=click.Choice(["console", "json"], case_sensitive=False),
        default="console",
        envvar="DSLAUNCH_LOG_FORMAT",
        show_default=True,
        help="Console records as text or one JSON object per line.",
    ),
    Option(
        ["--log-ranks"],
        section=OUTPUT,
        metavar="SPEC",
        default="0",
        envvar="DSLAUNCH_LOG_RANKS",
        callback=_ranks_option,
        show_default=True,
        help="Ranks whose records below WARNING reach the console: 'all', 'none', '0,8-15', "
        "'local:0' (local rank 0 of each node), 'node:0'.",
    ),
    Option(
        ["--log-color"],
        section=OUTPUT,
        type=click.Choice(["auto", "always", "never"], case_sensitive=False),
        default="auto",
        show_default=True,
        help="Colour console records (auto: stdout is a terminal; honours NO_COLOR, FORCE_COLOR).",
    ),
    Option(
        ["--collapse-output/--no-collapse-output"],
        section=OUTPUT,
        default=True,
        help="Print a console line that many ranks print within a second once, prefixed with their ranks "
        "('[rank1-255]: ...'); --log-dir's files keep every line [default: on].",
    ),
    Option(
        ["--wall-clock-breakdown"],
        section=OUTPUT,
        is_flag=True,
        default=None,
        help="Print the timers' wall-clock breakdown at any log level [config: wall_clock_breakdown].",
    ),
]


def merged_spec(cli: str | None, env_text: str | None, config: Mapping[str, Any]) -> S.LogSpec:
    """CLI over env over config, per key; errors name the source."""
    from dslaunch.logs import spec as S

    spec = S.LogSpec()
    value = config.get("log_level")
    if value is not None:
        if not isinstance(value, str):
            raise DslaunchError(
                f"config key log_level must be a string spec like 'info', not {value!r}", option="--config"
            )
        try:
            spec = S.parse_spec(value).merged_over(spec)
        except S.SpecError as exc:
            raise DslaunchError(f"config key log_level: {exc}", option="--config") from None
    if env_text and env_text.strip():
        try:
            spec = S.parse_spec(env_text).merged_over(spec)
        except S.SpecError as exc:
            raise DslaunchError(f"environment DSLAUNCH_LOG_LEVEL={env_text!r}: {exc}") from None
    if cli is not None:
        spec = S.parse_spec(cli).merged_over(spec)  # validated by the option callback
    return spec


def _config_switches(config: Mapping[str, Any], wall_clock: bool | None) -> dict[str, bool]:
    comms = config.get("comms_logger")
    return {
        "wall_clock_breakdown": bool(config.get("wall_clock_breakdown")) if wall_clock is None else wall_clock,
        "comms_logger": bool(comms.get("enabled")) if isinstance(comms, dict) else bool(comms),
    }


@dataclass(frozen=True)
class LogChoices:
    spec: S.LogSpec
    fmt: str  # console | json
    color: bool
    ranks: str  # canonical --log-ranks
    switches: tuple[str, ...]  # DSLAUNCH_<NAME>=1 for each: wall_clock_breakdown, comms_logger
    steps_per_print: int | None
    collapse_output: bool = True

    def rank_env(self, log_dir: str | None) -> dict[str, str]:
        """What every rank needs to log as the launcher was told to."""
        from dslaunch.plan import COLLAPSE_VAR

        env = {
            "DSLAUNCH_LOG_LEVEL": self.spec.canonical(),
            "DSLAUNCH_LOG_FORMAT": self.fmt,
            "DSLAUNCH_LOG_COLOR": "1" if self.color else "0",
            "DSLAUNCH_LOG_RANKS": self.ranks,
        }
        if log_dir:
            env["DSLAUNCH_LOG_DIR"] = log_dir
        env.update((f"DSLAUNCH_{switch.upper()}", "1") for switch in self.switches)
        if self.steps_per_print is not None:
            env["DSLAUNCH_STEPS_PER_PRINT"] = str(self.steps_per_print)
        if not self.collapse_output:  # the agents and the launcher read it in the plan (LaunchPlan.collapse_output)
            env[COLLAPSE_VAR] = "0"
        return env


def parse(values: Mapping[str, Any], config: Mapping[str, Any], environ: Mapping[str, str]) -> LogChoices:
    from dslaunch.inputs.config import ConfigError, steps_per_print
    from dslaunch.logs import spec as S

    try:
        every = steps_per_print(config)
    except ConfigError as exc:
        raise DslaunchError(exc.message, option="--config") from None
    switches = _config_switches(config, values.get("wall_clock_breakdown"))
    return LogChoices(
        spec=merged_spec(values.get("log_level"), environ.get("DSLAUNCH_LOG_LEVEL"), config),
        fmt=(values.get("log_format") or "console").lower(),
        color=S.decide_color((values.get("log_color") or "auto").lower(), sys.stdout.isatty(), environ),
        ranks=values.get("log_ranks") or "0",
        switches=tuple(name for name, on in switches.items() if on),
        steps_per_print=every,
        collapse_output=values.get("collapse_output", True) is not False,
    )


def configure(choices: LogChoices, plan: LaunchPlan, *, dry_run: bool) -> None:
    """Set up the launcher's own logging (a side effect: after the plan is frozen)."""
    from dslaunch.logs import _core
    from dslaunch.logs import spec as S

    _core.configure(
        choices.spec,
        role="launcher",
        fmt=choices.fmt,
        color=choices.color,
        log_dir=None if dry_run else plan.log_dir,
        facts={"run_id": plan.run_id},
    )
    log = _core.get_logger("launcher")
    if log.is_enabled_for(S.INFO):
        log.info(
            "hosts chosen",
            nodes=[f"{n.host}:{','.join(n.slots)}" for n in plan.nodes],
            ranks=plan.world_size,
            log_spec=choices.spec.canonical(),
        )


def log_launch(
    launcher: str, commands: Sequence[str], env: Sequence[tuple[str, str]], secrets: AbstractSet[str]
) -> None:
    """The launcher's record of what it runs (secrets masked)."""
    from dslaunch import masking
    from dslaunch.logs import _core
    from dslaunch.logs import spec as S

    log = _core.get_logger(f"runner.{launcher}" if launcher.isidentifier() else "runner")
    if log.is_enabled_for(S.INFO):
        for command in commands:
            log.info("command", command=masking.mask(command, secrets))
    if log.is_enabled_for(S.DEBUG):
        log.debug("rank environment", env={k: masking.mask_value(k, v, secrets) for k, v in env})
