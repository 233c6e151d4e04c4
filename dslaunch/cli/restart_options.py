"""Restart options: how often a failed job is started again, and how long to wait in between."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from dslaunch.cli.help_sections import RESTARTS, Option
from dslaunch.cli.types import Seconds, Whole, pet

if TYPE_CHECKING:
    from dslaunch.plan import Restarts

MAX_RESTARTS = 10_000
# Restarts().delay, kept in step by a test (tests/cli/test_areas.py): importing dslaunch.plan here would slow --help.
DEFAULT_DELAY = 1.0

PARAMS: list[click.Parameter] = [
    Option(
        ["--max-restarts"],
        section=RESTARTS,
        type=Whole(0, MAX_RESTARTS),
        envvar=pet("max_restarts"),
        default=0,
        show_default=True,
        metavar="N",
        help="When a rank fails (or a node is lost), stop the job on every node and start it again, "
        "at most N times; ranks read the attempt from TORCHELASTIC_RESTART_COUNT. A signal to dslaunch "
        "is never restarted.",
    ),
    Option(
        ["--restart-delay"],
        section=RESTARTS,
        type=Seconds(0, 86400),
        default=DEFAULT_DELAY,
        show_default=True,
        metavar="SECONDS",
        help="Wait between a failed attempt's end and the next start.",
    ),
]


def parse(values: Mapping[str, Any]) -> Restarts:
    from dslaunch.plan import Restarts

    return Restarts(max_restarts=values["max_restarts"], delay=values["restart_delay"])
