"""Seeing a running job (docs/observability.md): the job-wide breakdown's period, stragglers, metrics,
Kubeflow Trainer's progress API.

``--wall-clock-breakdown`` itself is a logging option (``cli/log_options.py``: it also turns on each rank's own
breakdown); this area reads it too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from dslaunch.cli.help_sections import DIAGNOSTICS, OUTPUT, Option
from dslaunch.cli.types import Seconds, Whole

if TYPE_CHECKING:
    from dslaunch.observe.settings import ObserveSettings

# Kept in step with dslaunch.observe (tests/cli/test_observe_options.py): importing it here would slow --help.
DEFAULT_EVERY = 100
DEFAULT_FACTOR = 1.5
DEFAULT_STEPS = 5
DEFAULT_STATUS_EVERY = 30.0
MIN_STATUS_EVERY = 0.1  # one request in flight at most, but a tighter loop only meets the endpoint's rate limit
_EVERY = re.compile(r"([0-9]{1,9})(s?)")
_PORT = re.compile(r"(?:(\[[0-9a-fA-F:.]+\]|[0-9.]+|[A-Za-z0-9.-]+):)?([0-9]{1,5})")


class Every(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.5
    """N steps, or Ns seconds: (steps, None) or (None, seconds)."""

    name = "every"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        match = _EVERY.fullmatch(str(value).strip())
        if match is None or int(match.group(1)) == 0:
            self.fail(f"{value!r} is not a period: give N steps (e.g. 100) or N seconds (e.g. 60s), N >= 1", param, ctx)
        number = int(match.group(1))
        return (None, float(number)) if match.group(2) else (number, None)


class Listen(click.ParamType):  # type: ignore[type-arg]
    """[ADDR:]PORT, port 1-65535: (addr or "", port)."""

    name = "listen"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        match = _PORT.fullmatch(str(value).strip())
        if match is None or not 1 <= int(match.group(2)) <= 65535:
            self.fail(
                f"{value!r} is not a port: give PORT (1-65535) or ADDR:PORT, e.g. 9400 or 127.0.0.1:9400", param, ctx
            )
        return (match.group(1) or "").strip("[]"), int(match.group(2))


PARAMS: list[click.Parameter] = [
    Option(
        ["--breakdown-every"],
        section=OUTPUT,
        type=Every(),
        default=str(DEFAULT_EVERY),
        show_default=True,
        metavar="N|Ns",
        help="With --wall-clock-breakdown: print the job-wide breakdown (every rank's timer regions: min, median, "
        "max, the slowest rank and its host) every N steps, or every N seconds with 's'; --log-dir keeps each "
        "in breakdown.jsonl.",
    ),
    Option(
        ["--straggler-factor"],
        section=DIAGNOSTICS,
        type=Seconds(0, 1000),
        default=DEFAULT_FACTOR,
        show_default=True,
        metavar="X",
        help="Name a rank (one WARNING, one more when it recovers) whose every step in a timer region takes over "
        "X times the job's median for --straggler-steps steps; 0: off.",
    ),
    Option(
        ["--straggler-steps"],
        section=DIAGNOSTICS,
        type=Whole(1, 100_000),
        default=DEFAULT_STEPS,
        show_default=True,
        metavar="N",
        help="Steps a rank must stay slow (or fast again) before it is named; each rank sends its timers once "
        "per N steps.",
    ),
    Option(
        ["--metrics-port"],
        section=DIAGNOSTICS,
        type=Listen(),
        metavar="[ADDR:]PORT",
        help="Serve Prometheus metrics (dslaunch_*) at http://ADDR:PORT/metrics while the job runs "
        "[default: off; ADDR: every address].",
    ),
    Option(
        ["--metrics-file"],
        section=DIAGNOSTICS,
        type=click.Path(dir_okay=False),
        metavar="PATH",
        help="Write the same metrics to PATH every second (node-exporter's textfile collector: name it *.prom).",
    ),
    Option(
        ["--status-line"],
        section=OUTPUT,
        type=click.Choice(["auto", "on", "off"], case_sensitive=False),
        default="auto",
        show_default=True,
        help="A status line at the bottom of the terminal (step, steps/s, ranks alive, restarts, the slowest "
        "rank) below the ranks' output; auto: where stdout and stderr are a terminal. Not under srun or on several "
        "local nodes, whose output others write.",
    ),
    Option(
        ["--total-steps"],
        section=DIAGNOSTICS,
        type=Whole(1, 10**15),
        metavar="N",
        help="The job's steps in all (each attempt's count, as its ranks' timers.step() calls): the progress "
        "and time left posted to Kubeflow Trainer's progress API.",
    ),
    Option(
        ["--trainer-status-every"],
        section=DIAGNOSTICS,
        type=Seconds(0, 86400),
        default=DEFAULT_STATUS_EVERY,
        show_default=True,
        metavar="SECONDS",
        help="Where KUBEFLOW_TRAINER_STATUS_URL is set (Kubeflow Trainer), post the job's progress and metrics "
        "there this often (the coordinator only), and at the end; 0: off (the training script reports itself).",
    ),
]


def parse(
    values: Mapping[str, Any], log_dir: str | None, config: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> ObserveSettings:
    import os

    from dslaunch.errors import DslaunchError
    from dslaunch.observe.settings import STATUS_URL, ObserveSettings

    factor = float(values.get("straggler_factor", DEFAULT_FACTOR))
    if 0 < factor <= 1:
        raise DslaunchError(f"{factor:g} is not a factor above the median: give a number over 1, or 0 for off")
    status_every = float(values.get("trainer_status_every", DEFAULT_STATUS_EVERY))
    if 0 < status_every < MIN_STATUS_EVERY:
        raise DslaunchError(
            f"--trainer-status-every {status_every:g}: post at most every {MIN_STATUS_EVERY:g} s, or 0 for off"
        )
    steps, seconds = values.get("breakdown_every") or (DEFAULT_EVERY, None)
    wall = values.get("wall_clock_breakdown")
    listen = values.get("metrics_port")
    return ObserveSettings(
        breakdown=bool(config.get("wall_clock_breakdown")) if wall is None else bool(wall),
        every_steps=steps,
        every_seconds=seconds,
        straggler_factor=factor,
        straggler_steps=int(values.get("straggler_steps", DEFAULT_STEPS)),
        metrics_port=None if listen is None else listen[1],
        metrics_addr="" if listen is None else listen[0],
        metrics_file=values.get("metrics_file"),
        log_dir=log_dir,
        trainer_status=bool((os.environ if environ is None else environ).get(STATUS_URL)) and status_every > 0,
        status_every=status_every,
        total_steps=values.get("total_steps"),
        status_line=_status_line(
            str(values.get("status_line") or "auto").lower(), os.environ if environ is None else environ
        ),
    )


def _status_line(choice: str, environ: Mapping[str, str]) -> bool:
    import sys

    if choice != "auto":
        return choice == "on"
    return sys.stdout.isatty() and sys.stderr.isatty() and environ.get("TERM", "dumb") not in ("", "dumb")
