"""``dslaunch --report LOGDIR``: print the state of the job that writes LOGDIR (running or ended,
``observe/live.py``) and its launch timeline, and write ``LOGDIR/timeline.html``; starts no job (an eager option,
like ``--version``). docs/diagnostics.md, docs/observability.md."""

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
    state = live_line(value)
    try:
        text, path = report(value)
    except DslaunchError:
        if state:  # a job that has not written its timeline yet: its state is the report
            click.echo(state)
            ctx.exit(0)
        raise
    click.echo(text)
    if state:
        click.echo(state)
    click.echo(f"timeline: {path}")
    ctx.exit(0)


def live_line(log_dir: str) -> str:
    """The job's state from ``LOGDIR/status.json`` in one line ("" when there is none)."""
    import time

    from dslaunch.observe import live

    status = live.read(log_dir)
    return "" if status is None else "job " + live.line(status, time.time(), live.launcher_alive(status))


PARAMS: list[click.Parameter] = [
    Option(
        ["--report"],
        section=DIAGNOSTICS,
        metavar="LOGDIR",
        expose_value=False,
        is_eager=True,
        callback=_report,
        help="Print the state of the job that writes LOGDIR with --log-dir (running: step, steps/s, ranks "
        "alive, restarts, slowest rank; or how it ended) and its launch timeline (per phase: median, slowest rank "
        "and host), write LOGDIR/timeline.html, and exit; starts no job.",
    ),
]
