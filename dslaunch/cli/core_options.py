"""Core options: where the ranks run (hosts, slots), what they run, and how the job ends."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from dslaunch.cli.help_sections import DIAGNOSTICS, HOSTS, JOB, OUTPUT, PODS, RESTARTS, Option
from dslaunch.cli.types import NodesType, NprocType, Seconds, Whole, pet
from dslaunch.errors import DslaunchError
from dslaunch.limits import MAX_WORLD_SIZE

if TYPE_CHECKING:  # what parsing needs is imported when it runs: --help only needs PARAMS
    from dslaunch.inputs import hostfile
    from dslaunch.plan import Program

DEFAULT_HOSTFILE = "/job/hostfile"  # DeepSpeed's default, read only if it exists
DEFAULT_PORT = 29500
NO_GPU = "gpu: no GPU is visible here (CUDA_VISIBLE_DEVICES, nvidia-smi, Slurm's GPUs): give a number, cpu or auto"


PARAMS: list[click.Parameter] = [
    Option(
        ["-H", "--hostfile"],
        section=HOSTS,
        metavar="PATH",
        help=f"MPI-style hostfile: '<host> slots=<n>' per line [default: {DEFAULT_HOSTFILE} if it exists, else local]",
    ),
    Option(
        ["-i", "--include"],
        section=HOSTS,
        default="",
        metavar="SPEC",
        help="Use only these hosts/slots, e.g. 'worker-0@worker-1:0,2'.",
    ),
    Option(
        ["-e", "--exclude"],
        section=HOSTS,
        default="",
        metavar="SPEC",
        help="Use everything but these hosts/slots, e.g. 'worker-1:0'.",
    ),
    Option(
        ["--num-nodes", "num_nodes"],
        section=HOSTS,
        type=Whole(1, MAX_WORLD_SIZE),
        metavar="N",
        help="Use the first N hosts of the hostfile.",
    ),
    Option(
        ["--nproc-per-node", "--num-gpus", "nproc_per_node"],
        section=JOB,
        envvar=pet("nproc_per_node"),
        type=NprocType(),
        help="Ranks per node: a number, gpu (one per visible GPU), cpu (one per usable CPU) or auto (gpu if "
        "there are GPUs, else cpu) [default: all GPUs, else 1].",
    ),
    Option(
        ["--launcher"],
        section=HOSTS,
        default="auto",
        show_default=True,
        metavar="NAME",
        help="How node agents are started: auto, local (more with ssh/pdsh/slurm/mpi).",
    ),
    Option(
        ["--master-addr"],
        section=JOB,
        envvar=pet("master_addr"),
        metavar="ADDR",
        help="Rendezvous address [default: 127.0.0.1 for a local job, else the first node].",
    ),
    Option(
        ["--master-port"],
        section=JOB,
        envvar=pet("master_port"),
        type=Whole(0, 65535),
        default=DEFAULT_PORT,
        show_default=True,
        help="Rendezvous port; 0 picks a free one.",
    ),
    Option(
        ["-m", "--module"],
        section=JOB,
        is_flag=True,
        envvar=pet("module"),
        help="Run SCRIPT as a module, like 'python -m'.",
    ),
    Option(
        ["--no-python"],
        section=JOB,
        is_flag=True,
        envvar=pet("no_python"),
        help="Run SCRIPT as an executable, without the Python bootstrap.",
    ),
    Option(
        ["--log-dir"],
        section=OUTPUT,
        envvar=pet("log_dir"),
        type=click.Path(file_okay=False),
        metavar="DIR",
        help="Also write each rank's output (and error file) to DIR/rank<N>.*",
    ),
    Option(
        ["--shutdown-timeout"],
        section=RESTARTS,
        type=Seconds(0, 86400),
        default=5.0,
        show_default=True,
        metavar="SECONDS",
        help="Grace between SIGTERM and SIGKILL when the job is torn down.",
    ),
    Option(
        ["--hang-timeout"],
        section=DIAGNOSTICS,
        type=Seconds(0, 86400 * 7),
        metavar="SECONDS",
        help="Fail the job (exit 124) when no rank has made progress (output, dslaunch.heartbeat(), "
        "engine.timers.step()) for SECONDS, after printing every rank's stack [default: off; config: hang_timeout].",
    ),
    Option(
        ["--config"],
        section=JOB,
        type=click.Path(dir_okay=False),
        metavar="JSON",
        help="DeepSpeed-style JSON config; its launcher, logging and mesh keys reach every rank.",
    ),
    Option(
        ["--run-id", "--rdzv-id", "--rdzv_id", "run_id"],
        section=JOB,
        metavar="ID",
        envvar=pet("run_id", "RDZV_ID"),
        help="Job id used to tag every process of the job, every rank's TORCHELASTIC_RUN_ID [default: random; "
        "with --node-rank, one launcher per node, a digest of what every node is given alike].",
    ),
    Option(
        ["--nnodes", "nnodes"],
        section=PODS,
        type=NodesType(),
        envvar=pet("nnodes"),
        metavar="N|MIN:MAX",
        help="With a hostfile: run on at least MIN and at most MAX of its healthy hosts, the rest are spares that "
        "replace failed nodes (docs/elastic.md). Without one, torchrun's one launcher per node (e.g. a Kubernetes "
        "pod each): this node is --node-rank of N, with the rendezvous at --master-addr.",
    ),
    Option(
        ["--preload"],
        section=JOB,
        metavar="MODULES",
        help="Import these modules (comma-separated, e.g. torch) once per node, then fork each rank from that "
        "process: faster start-up, shared memory (docs/preload.md) [default: config 'preload', else off].",
    ),
    Option(["--dry-run"], section=DIAGNOSTICS, is_flag=True, help="Print the launch plan and start nothing."),
    Option(
        ["--json", "as_json"],
        section=DIAGNOSTICS,
        is_flag=True,
        help="With --dry-run: print the plan as one JSON object.",
    ),
]


@dataclass(frozen=True)
class CoreChoices:
    """The core options, parsed and checked on their own (hosts are filtered in ``decide``)."""

    pool: hostfile.ResourcePool | None  # the parsed hostfile; None without one
    include: str
    exclude: str
    num_nodes: int | None
    nproc: int | str | None
    launcher: str  # as asked: auto, local, ssh, pdsh, slurm, openmpi, mpich
    master_addr: str | None
    master_port: int
    port_given: bool  # --master-port on the command line or environment, not the default
    program: Program
    shutdown_timeout: float
    hang_timeout: float | None
    log_dir: str | None
    cwd: str
    run_id: str | None  # as given; decided in decide (cli/run_ids.py)
    config_path: str | None
    config: Mapping[str, Any]
    dry_run: bool
    json: bool
    nnodes: int | None = None  # one launcher per node: N (a single count, no hostfile)
    preload: tuple[str, ...] = ()
    nnodes_range: tuple[int, int] | None = None  # --nnodes as given: (MIN, MAX), N is (N, N)


def parse(values: Mapping[str, Any]) -> CoreChoices:
    from dslaunch.inputs.config import ConfigError, hang_timeout, load_config
    from dslaunch.plan import Program

    if values["module"] and values["no_python"]:
        raise DslaunchError("--module and --no-python cannot be used together: pick one way to run SCRIPT")
    if values["as_json"] and not values["dry_run"]:
        raise DslaunchError("--json only shapes the --dry-run output: add --dry-run, or drop --json", option="--json")
    explicit = values.get("hostfile") is not None
    pool = _read_hostfile(values["hostfile"] if explicit else DEFAULT_HOSTFILE, explicit)
    config_path = os.path.abspath(values["config"]) if values.get("config") else None
    config: Mapping[str, Any] = {}
    if config_path is not None:
        try:
            config = load_config(config_path)
        except ConfigError as exc:
            raise DslaunchError(exc.message, option="--config") from None
    given = values.get("run_id")
    hang = values.get("hang_timeout")
    if hang is not None and hang <= 0:
        raise DslaunchError(f"{hang:g} is not a number of seconds above 0", option="--hang-timeout")
    if hang is None:
        try:
            hang = hang_timeout(config)
        except ConfigError as exc:
            raise DslaunchError(exc.message, option="--config") from None
    return CoreChoices(
        pool=pool,
        include=values.get("include") or "",
        exclude=values.get("exclude") or "",
        num_nodes=values.get("num_nodes"),
        nproc=values.get("nproc_per_node"),
        launcher=_launcher(values["launcher"]),
        master_addr=values.get("master_addr") or None,
        master_port=values["master_port"],
        port_given=values["master_port"] != DEFAULT_PORT or _source("master_port") not in _DEFAULTED,
        program=Program(
            target=values["script"] if values["script"] is not None else "-",  # no SCRIPT: --preflight only
            args=tuple(values["script_args"]),
            module=values["module"],
            no_python=values["no_python"],
            python=sys.executable,
        ),
        shutdown_timeout=values["shutdown_timeout"],
        hang_timeout=hang,
        log_dir=os.path.abspath(values["log_dir"]) if values.get("log_dir") else None,
        cwd=os.getcwd(),
        run_id=_run_id(given) if given is not None else None,
        config_path=config_path,
        config=config,
        dry_run=values["dry_run"],
        json=values["as_json"],
        nnodes=_pod_count(values.get("nnodes"), pool),
        preload=preload_modules(values.get("preload"), config),
        nnodes_range=_node_range(values, pool),
    )


def _pod_count(given: tuple[int, int] | None, pool: hostfile.ResourcePool | None) -> int | None:
    """--nnodes N without a hostfile: torchrun's one launcher per node (a range there is refused in decide)."""
    if given is None or pool is not None:
        return None
    return given[0] if given[0] == given[1] else None


def _node_range(values: Mapping[str, Any], pool: hostfile.ResourcePool | None) -> tuple[int, int] | None:
    """--nnodes MIN:MAX, or DeepSpeed's --min/--max_elastic_nodes (which only mean something with a hostfile)."""
    given: tuple[int, int] | None = values.get("nnodes")
    ds_range: tuple[int, int | None] | None = values.get("ds_elastic_range")
    if ds_range is None or pool is None:
        return given
    low, high = ds_range
    high = len(pool) if high is None else high
    if given is not None and given != (low, high):
        raise DslaunchError("--min/--max_elastic_nodes and --nnodes disagree: give only --nnodes MIN:MAX")
    if low > high:
        raise DslaunchError(f"--min_elastic_nodes {low} is above --max_elastic_nodes {high}: give MIN <= MAX")
    return low, high


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def preload_modules(given: str | None, config: Mapping[str, Any]) -> tuple[str, ...]:
    """--preload (or config 'preload': a string like the option, or a list of names) as checked module names."""
    where, value = "", given
    if given is None:
        where, value = "config key preload: ", config.get("preload")
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str):
        raise DslaunchError(f"{where}give module names, e.g. 'torch,transformers', not {value!r}", option="--preload")
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    for name in names:
        if not _MODULE.fullmatch(name):
            raise DslaunchError(
                f"{where}{name!r} is not a module name (dotted Python names, comma-separated, e.g. torch,numpy)",
                option="--preload",
            )
    return tuple(dict.fromkeys(names))


_DEFAULTED = (ParameterSource.DEFAULT, None)


def _source(name: str) -> ParameterSource | None:
    ctx = click.get_current_context(silent=True)
    return ctx.get_parameter_source(name) if ctx is not None else None


def _read_hostfile(path: str, explicit: bool) -> hostfile.ResourcePool | None:
    from dslaunch.cli.files import read_option_file
    from dslaunch.inputs import hostfile

    text = read_option_file(path, "hostfile", "-H/--hostfile", required=explicit)
    return None if text is None else hostfile.parse_hostfile(text, path)


def resource_pool(core: CoreChoices, environ: Mapping[str, str]) -> hostfile.ResourcePool:
    """Hosts and slots after the hostfile, filters and --num-* options."""
    from dslaunch.inputs import hostfile
    from dslaunch.oslib.binding import usable_cores
    from dslaunch.oslib.gpus import gpu_labels

    nproc = core.nproc
    num_slots = nproc if isinstance(nproc, int) else None
    pool = core.pool
    if pool is None:
        if core.num_nodes not in (None, 1):
            raise DslaunchError("--num-nodes is more than 1 but there is no hostfile: give one with -H")
        labels = () if nproc == "cpu" else gpu_labels(environ)
        if nproc == "gpu" and not labels:
            raise DslaunchError(NO_GPU, option="--nproc-per-node")
        if not labels:
            cpus = len(usable_cores())  # the CPUs this process may use (cpusets), as torchrun counts them
            count = num_slots or (cpus if nproc in ("cpu", "auto") else 1)
            labels = tuple(str(i) for i in range(count))
        pool = {"localhost": labels}
    return hostfile.select(
        pool, include_spec=core.include, exclude_spec=core.exclude, num_nodes=core.num_nodes, num_slots=num_slots
    )


LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})


def _launcher(value: str) -> str:
    from dslaunch.runners import USER_LAUNCHERS

    name = value.lower()
    if name not in USER_LAUNCHERS:
        raise DslaunchError(f"unknown launcher {value!r}; known: {', '.join(USER_LAUNCHERS)}", option="--launcher")
    return name


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _run_id(value: str) -> str:
    """The run id names files and tags processes on every host: a short plain word."""
    if not _RUN_ID.fullmatch(value):
        raise DslaunchError(f"{value!r}: use 1-64 of A-Z a-z 0-9 . _ - (not starting with . _ -)", option="--run-id")
    return value
