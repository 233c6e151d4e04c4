"""Core options: where the ranks run (hosts, slots), what they run, and how the job ends."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import click

from dslaunch import hostfile
from dslaunch.cli.draft import PlanDraft
from dslaunch.cli.files import read_option_file
from dslaunch.config import ConfigError, load_config, unknown_key_warnings
from dslaunch.gpus import gpu_labels
from dslaunch.plan import Program, assign_ranks

DEFAULT_HOSTFILE = "/job/hostfile"  # DeepSpeed's default, read only if it exists


class NprocType(click.ParamType):  # type: ignore[type-arg]  # generic only from click 8.5
    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value == "auto":
            return value  # type: ignore[no-any-return]
        text = str(value).strip().lower()
        if text == "auto":
            return "auto"
        if text.isdigit() and int(text) > 0:
            return int(text)
        self.fail(f"{value!r} is not a positive whole number or 'auto'", param, ctx)


PARAMS: list[click.Parameter] = [
    click.Option(
        ["-H", "--hostfile"],
        metavar="PATH",
        help=f"MPI-style hostfile: '<host> slots=<n>' per line [default: {DEFAULT_HOSTFILE} if it exists, else local]",
    ),
    click.Option(
        ["-i", "--include"],
        default="",
        metavar="SPEC",
        help="Use only these hosts/slots, e.g. 'worker-0@worker-1:0,2'.",
    ),
    click.Option(
        ["-e", "--exclude"], default="", metavar="SPEC", help="Use everything but these hosts/slots, e.g. 'worker-1:0'."
    ),
    click.Option(
        ["--num-nodes", "num_nodes"],
        type=click.IntRange(min=1),
        metavar="N",
        help="Use the first N hosts of the hostfile.",
    ),
    click.Option(
        ["--nproc-per-node", "--num-gpus", "nproc_per_node"],
        type=NprocType(),
        help="Ranks per node: a number, or 'auto' (all GPUs, else all CPUs) [default: all GPUs, else 1].",
    ),
    click.Option(
        ["--launcher"],
        default="auto",
        show_default=True,
        metavar="NAME",
        help="How node agents are started: auto, local (more with ssh/pdsh/slurm/mpi).",
    ),
    click.Option(
        ["--master-addr"],
        metavar="ADDR",
        help="Rendezvous address [default: 127.0.0.1 for a local job, else the first node].",
    ),
    click.Option(
        ["--master-port"],
        type=click.IntRange(0, 65535),
        default=29500,
        show_default=True,
        help="Rendezvous port; 0 picks a free one.",
    ),
    click.Option(["-m", "--module"], is_flag=True, help="Run SCRIPT as a module, like 'python -m'."),
    click.Option(["--no-python"], is_flag=True, help="Run SCRIPT as an executable, without the Python bootstrap."),
    click.Option(
        ["--log-dir"],
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="Also write each rank's output (and error file) to DIR/rank<N>.*",
    ),
    click.Option(
        ["--shutdown-timeout"],
        type=click.FloatRange(min=0),
        default=5.0,
        show_default=True,
        metavar="SECONDS",
        help="Grace between SIGTERM and SIGKILL when the job is torn down.",
    ),
    click.Option(
        ["--config"],
        type=click.Path(dir_okay=False),
        metavar="JSON",
        help="DeepSpeed-style JSON config; its launcher, logging and mesh keys reach every rank.",
    ),
    click.Option(["--run-id"], metavar="ID", help="Job id used to tag every process of the job [default: random]."),
    click.Option(["--dry-run"], is_flag=True, help="Print the launch plan and start nothing."),
    click.Option(["--json", "as_json"], is_flag=True, help="With --dry-run: print the plan as one JSON object."),
]


def _read_hostfile(path: str, explicit: bool) -> hostfile.ResourcePool | None:
    text = read_option_file(path, "hostfile", "'-H/--hostfile'", required=explicit)
    if text is None:
        return None
    try:
        return hostfile.parse_hostfile(text, path)
    except hostfile.HostfileError as exc:
        raise click.UsageError(str(exc)) from None


def resource_pool(values: dict[str, Any], env: dict[str, str]) -> hostfile.ResourcePool:
    """Hosts and slots after the hostfile, filters and --num-* options."""
    explicit = values.get("hostfile") is not None
    path = values["hostfile"] if explicit else DEFAULT_HOSTFILE
    pool = _read_hostfile(path, explicit)
    nproc = values.get("nproc_per_node")
    num_slots = nproc if isinstance(nproc, int) else None
    if pool is None:
        if values.get("num_nodes") not in (None, 1):
            raise click.UsageError("--num-nodes is more than 1 but there is no hostfile: give one with -H")
        labels = gpu_labels(env)
        if not labels:
            count = num_slots or ((os.cpu_count() or 1) if nproc == "auto" else 1)
            labels = tuple(str(i) for i in range(count))
        pool = {"localhost": labels}
    try:
        return hostfile.select(
            pool,
            include_spec=values.get("include") or "",
            exclude_spec=values.get("exclude") or "",
            num_nodes=values.get("num_nodes"),
            num_slots=num_slots,
        )
    except hostfile.FilterError as exc:
        raise click.UsageError(str(exc)) from None


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    if values["module"] and values["no_python"]:
        raise click.UsageError("--module and --no-python cannot be used together: pick one way to run SCRIPT")
    pool = resource_pool(values, dict(os.environ))
    nodes = assign_ranks(pool)
    if not nodes:
        raise click.UsageError("no slots left to run on after --include/--exclude")
    draft.nodes = nodes
    draft.launcher = _launcher(values["launcher"])
    draft.master_port = values["master_port"]
    if values.get("master_addr"):
        draft.master_addr = values["master_addr"]
    elif len(nodes) > 1 or nodes[0].host not in LOCAL_NAMES:
        draft.master_addr = nodes[0].host.rpartition("@")[2]
    draft.program = Program(
        target=values["script"],
        args=tuple(values["script_args"]),
        module=values["module"],
        no_python=values["no_python"],
        python=sys.executable,
    )
    draft.shutdown_timeout = values["shutdown_timeout"]
    draft.log_dir = os.path.abspath(values["log_dir"]) if values.get("log_dir") else None
    draft.cwd = os.getcwd()
    given = values.get("run_id")
    draft.run_id = _run_id(given if given is not None else os.environ.get("DSLAUNCH_RUN_ID") or os.urandom(6).hex())
    if values.get("config"):
        path = os.path.abspath(values["config"])
        try:
            draft.config = load_config(path)
        except ConfigError as exc:
            raise click.BadParameter(str(exc), param_hint="'--config'") from None
        for warning in unknown_key_warnings(draft.config):  # here only: ranks read the file without a word
            click.echo(warning, err=True)
        draft.env["DSLAUNCH_CONFIG"] = path
    draft.dry_run = values["dry_run"]
    draft.json = values["as_json"]


LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})


def _launcher(value: str) -> str:
    from dslaunch.runners import USER_LAUNCHERS

    name = value.lower()
    if name not in USER_LAUNCHERS:
        raise click.BadParameter(
            f"unknown launcher {value!r}; known: {', '.join(USER_LAUNCHERS)}", param_hint="'--launcher'"
        )
    return name


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _run_id(value: str) -> str:
    """The run id names files and tags processes on every host: a short plain word."""
    if not _RUN_ID.fullmatch(value):
        raise click.BadParameter(
            f"{value!r}: use 1-64 of A-Z a-z 0-9 . _ - (not starting with . _ -)", param_hint="'--run-id'"
        )
    return value
