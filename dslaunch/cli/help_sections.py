"""``dslaunch --help`` in sections, the most used first.

Each option says which section lists it where its area declares it (``Option(..., section=JOB)``);
:func:`format_sections` writes the sections in :data:`ORDER`, each option in declaration order. An option
without a section is listed last, under :data:`OTHER`, and ``tests/cli/test_help_sections.py`` fails naming
it, so a new option finds its home. DeepSpeed's spellings are hidden options (no ``DSLAUNCH_*`` variable, not
offered by click) that their own section lists all the same.

Only click, which ``--help`` loads anyway: nothing here may slow start-up (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import click

JOB = "The job"
HOSTS = "Hosts: hostfile, ssh, pdsh"
SLURM = "Slurm and MPI"
PODS = "One launcher per node: pods, torchrun's shape"
RESTARTS = "Stops, restarts and spares"
OUTPUT = "Output and logging"
MESH = "Device mesh"
DIAGNOSTICS = "Diagnostics"
DEEPSPEED = "DeepSpeed's spellings"
ORDER = (JOB, HOSTS, SLURM, PODS, RESTARTS, OUTPUT, MESH, DIAGNOSTICS, DEEPSPEED)
OTHER = "Other options"  # options declared without a section (a test refuses them)

# A line under a section's title where its options alone would not say how that kind of job starts.
INTRO = {
    SLURM: "Inside an allocation, 'dslaunch train.py' runs srun itself (--launcher slurm, picked when SLURM_JOB_ID "
    "is set); under 'srun --ntasks-per-node=1' each task starts its node's ranks (docs/slurm.md). "
    "--launcher openmpi|mpich start one agent a host through mpirun or mpiexec.",
    PODS: "Kubernetes and other set-ups that run one launcher a node: each option also reads torchrun's PET_<NAME> "
    "variable, and the pods act as one job (docs/kubernetes.md).",
    RESTARTS: "One failing rank or lost node stops every rank on every node; the job exits with its code "
    "(docs/restarts.md, docs/elastic.md). SIGTERM/SIGINT to dslaunch is a requested stop: each rank's main process "
    "gets it, its process group after --stop-grace; the job exits 143/130 (docs/stopping.md).",
    DEEPSPEED: "The deepspeed launcher's flags, each taken with one warning naming the dslaunch option; "
    "-H, -i, -e, --launcher and --module are spelled alike (docs/migration.md).",
}

Row = tuple[str, str]
COLUMN_MAX = 30  # click's: a longer name puts its description on the next line


class Option(click.Option):
    """A click option listed under ``section`` in ``--help``."""

    def __init__(self, param_decls: Sequence[str], *, section: str, **attrs: Any) -> None:
        super().__init__(param_decls, **attrs)
        self.section = section


def section_of(ctx: click.Context, param: click.Parameter) -> str | None:
    """The section listing ``param``; None for an option declared without one."""
    if isinstance(param, Option):
        return param.section
    if param.opts == ctx.help_option_names:  # click's own -h/--help (click.Command.get_help_option)
        return JOB
    return None


def help_row(ctx: click.Context, param: click.Option) -> Row | None:
    """``param``'s row: click's, or for a hidden option with a section (DeepSpeed's spellings) its names,
    metavar and help."""
    if isinstance(param, Option) and param.hidden:
        names = ", ".join(param.opts)
        return (f"{names} {param.metavar}" if param.metavar else names), param.help or ""
    return param.get_help_record(ctx)


def sectioned_rows(ctx: click.Context, params: Iterable[click.Parameter]) -> list[tuple[str, list[Row]]]:
    """Each section that lists an option, in :data:`ORDER` (then :data:`OTHER`), with its rows; arguments are
    in the usage line."""
    rows: dict[str, list[Row]] = {}
    for param in params:
        row = help_row(ctx, param) if isinstance(param, click.Option) else None
        if row is not None:
            rows.setdefault(section_of(ctx, param) or OTHER, []).append(row)
    return [(title, rows[title]) for title in (*ORDER, OTHER) if title in rows]


def format_sections(ctx: click.Context, formatter: click.HelpFormatter, params: Iterable[click.Parameter]) -> None:
    """What ``click.Command.format_options`` writes as one "Options:" list, here one list a section, their
    descriptions in one column."""
    sections = sectioned_rows(ctx, params)
    column = min(max((len(name) for _, rows in sections for name, _ in rows), default=0), COLUMN_MAX)
    for title, rows in sections:
        with formatter.section(title):
            if title in INTRO:
                formatter.write_text(INTRO[title])
                formatter.write_paragraph()
            # click puts descriptions at min(widest name, col_max) + col_spacing: the same column in every section
            widest = min(max(len(name) for name, _ in rows), COLUMN_MAX)
            formatter.write_dl(rows, col_max=COLUMN_MAX, col_spacing=2 + column - widest)
