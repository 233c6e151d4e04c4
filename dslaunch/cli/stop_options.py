"""Stop options: how a requested stop (SIGTERM from Kubernetes or Slurm, Ctrl-C) ends the job (docs/stopping.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from dslaunch.cli.help_sections import RESTARTS, Option
from dslaunch.cli.types import Seconds, Whole

# LaunchPlan's DEFAULT_STOP_GRACE, kept in step by a test (tests/cli/test_areas.py): importing dslaunch.plan here
# would slow --help. 20 s + --shutdown-timeout's 5 s + the launcher's own end fit Kubernetes' and Slurm's 30 s.
DEFAULT_GRACE = 20.0
STOP_ON = ("USR1", "USR2")  # what --stop-on-signal takes: what sbatch --signal sends, and SIGTERM is already a stop


class SignalName(click.ParamType):  # type: ignore[type-arg]
    """USR1 or USR2 (also SIGUSR1, usr1): returned as SIGUSR1."""

    name = "signal"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        name = str(value).strip().upper().removeprefix("SIG")
        if name not in STOP_ON:
            self.fail(f"{value!r} is not one of {', '.join(STOP_ON)} (SIGTERM and SIGINT always request a stop)")
        return f"SIG{name}"


PARAMS: list[click.Parameter] = [
    Option(
        ["--stop-grace"],
        type=Seconds(0, 86400),
        default=DEFAULT_GRACE,
        show_default=True,
        metavar="SECONDS",
        section=RESTARTS,
        help="On a stop (SIGTERM, SIGINT, a pod's SIGTERM, a lost launcher) each rank's main process gets the "
        "signal; its process group (DataLoader workers...) gets SIGTERM SECONDS later, SIGKILL after "
        "--shutdown-timeout. Ranks read it as DSLAUNCH_STOP_GRACE. A second signal ends it at once.",
    ),
    Option(
        ["--stop-exit-code"],
        type=Whole(0, 255),
        metavar="N",
        section=RESTARTS,
        help="Exit N after a requested stop [default: 128+N of the signal: 143 for SIGTERM, 130 for SIGINT].",
    ),
    Option(
        ["--stop-on-signal"],
        type=SignalName(),
        metavar="SIG",
        section=RESTARTS,
        help=f"Take this signal ({' or '.join(STOP_ON)}, as sbatch --signal=B:USR1@120 sends it) as a stop "
        "request, as SIGTERM is; the ranks get SIGTERM [default: it is passed on to every rank].",
    ),
]


@dataclass(frozen=True)
class StopChoices:
    grace: float = DEFAULT_GRACE
    exit_code: int | None = None
    signal: str | None = None  # SIGUSR1

    def plan_fields(self) -> dict[str, Any]:
        """The plan's fields for them (``LaunchPlan.stop_*``)."""
        return {"stop_grace": self.grace, "stop_exit_code": self.exit_code, "stop_signal": self.signal}


def parse(values: Mapping[str, Any]) -> StopChoices:
    return StopChoices(values["stop_grace"], values.get("stop_exit_code"), values.get("stop_on_signal"))
