"""``dslaunch --report LOGDIR``: print the launch timeline of the job that wrote LOGDIR and write
``LOGDIR/timeline.html``; starts no job (an eager option, like ``--version``). docs/diagnostics.md."""

from __future__ import annotations

import os

import click

from dslaunch.cli.help_sections import DIAGNOSTICS, Option
from dslaunch.errors import DslaunchError


def report(log_dir: str) -> tuple[str, str]:
    """The text table of ``log_dir``'s timeline and the path of the page written next to its logs."""
    from dslaunch.oslib.owner_only import private_open
    from dslaunch.report import page, table, timeline

    found = timeline.load(log_dir)
    path = os.path.join(log_dir, "timeline.html")
    try:
        with private_open(path, "w", encoding="utf-8") as f:  # as private as the logs it is made of
            f.write(page.render(found, os.path.abspath(log_dir)))
    except OSError as exc:
        raise DslaunchError(f"cannot write {path}: {exc.strerror or exc}", option="--report") from None
    return table.render(found), path


def _report(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    """A user error here propagates: the command's parsing is inside ``command.user_errors()``."""
    if value is None or ctx.resilient_parsing:
        return
    text, path = report(value)
    click.echo(text)
    click.echo(f"timeline: {path}")
    ctx.exit(0)


PARAMS: list[click.Parameter] = [
    Option(
        ["--report"],
        section=DIAGNOSTICS,
        metavar="LOGDIR",
        expose_value=False,
        is_eager=True,
        callback=_report,
        help="Print the launch timeline (per phase: median, slowest rank and host) of the job that wrote "
        "LOGDIR with --log-dir, write LOGDIR/timeline.html, and exit; starts no job.",
    ),
]
