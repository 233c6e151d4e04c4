"""Restart options: how often a failed job is started again, and how long to wait in between."""

from __future__ import annotations

import re
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
DEFAULT_REPEAT_WINDOW = 300.0  # Restarts().repeat_window, kept in step the same way
MAX_REPEAT_WINDOW = 7 * 86400.0
_CODE = re.compile(r"[0-9]{1,3}")


class ExitCodes(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.5
    """A comma list of exit codes, each 1-255, as a sorted tuple without repeats ("" is none)."""

    name = "codes"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> tuple[int, ...]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        if not text:
            return ()
        codes = set()
        for item in text.split(","):
            code = item.strip()
            if not _CODE.fullmatch(code) or not 1 <= int(code) <= 255:
                self.fail(
                    f"{item.strip()!r} in {text!r} is not an exit code: give whole numbers 1-255, e.g. 3 or 3,4",
                    param,
                    ctx,
                )
            codes.add(int(code))
        return tuple(sorted(codes))


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
        ["--no-restart-on"],
        section=RESTARTS,
        type=ExitCodes(),
        default="",
        metavar="CODES",
        help="A rank that exits with one of these codes (a comma list, 1-255, e.g. 3 for 'bad config') ends the job "
        "at once, whatever --max-restarts allows.",
    ),
    Option(
        ["--repeat-window"],
        section=RESTARTS,
        type=Seconds(0, MAX_REPEAT_WINDOW),
        default=DEFAULT_REPEAT_WINDOW,
        show_default=True,
        metavar="SECONDS",
        help="A failure that repeats the same way (same rank, exit code and error) in two attempts in a row, before "
        "any rank's progress beat, ends the job. A script that never beats (no dslaunch.engine() or "
        "dslaunch.heartbeat(), e.g. one written for torchrun) is judged so only when both failures came within "
        "SECONDS of their attempt's start; later ones get every restart. 0: no repeat ends the job.",
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

    return Restarts(
        max_restarts=values["max_restarts"], delay=values["restart_delay"], repeat_window=values["repeat_window"]
    )


def no_restart_on(values: Mapping[str, Any]) -> tuple[int, ...]:
    codes: tuple[int, ...] = values["no_restart_on"]
    return codes
