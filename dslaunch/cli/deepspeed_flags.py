"""DeepSpeed launcher spellings (``deepspeed`` 0.19.8), mapped through one table to the v1 options.

:func:`translate` runs before any area parses: it rewrites ``values`` to the v1 names,
so the areas only ever see v1 values, and it warns once per DeepSpeed flag used, naming
the v1 spelling. Flags with no v1 meaning are a warned no-op or rejected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

from dslaunch.cli.help_sections import DEEPSPEED, Option
from dslaunch.cli.types import Whole
from dslaunch.errors import DslaunchError
from dslaunch.limits import MAX_WORLD_SIZE

UNSET = object()  # a converter's answer for DeepSpeed's "use the default" values (-1, "", "None")


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class DsFlag:
    names: tuple[str, ...]  # DeepSpeed's spellings
    dest: str  # click parameter name of the hidden option
    v1: str  # the v1 spelling shown in the warning ("" when there is none)
    target: str | None = None  # values key it sets; None: no-op or rejected
    is_flag: bool = False
    type: Any = click.STRING
    convert: Callable[[Any], Any] = _same
    reject: bool = False
    note: str = ""  # behaviour change, or why it has no meaning
    external: bool = False  # the v1 option itself also accepts this spelling (no hidden option, no warning)
    v1_option: str = ""  # the v1 option named when both spellings disagree [default: first word of v1]

    @property
    def v1_name(self) -> str:
        return self.v1_option or self.v1.split()[0]


def _minus_one(value: int) -> Any:
    return UNSET if value == -1 else value


def _none_string(value: str) -> Any:
    return UNSET if value in ("", "None") else value


def _pid_path(_value: bool) -> str:
    return f"/tmp/{os.getpid()}.deepspeed"  # DeepSpeed's name, so scripts that look for it find it


_NODES = "with a hostfile: at least MIN, at most MAX of its hosts, the rest spares (docs/elastic.md)"
_ELASTIC = "elastic training was removed in DeepSpeed 0.19.8: for nodes that may fail use --nnodes MIN:MAX"

TABLE: tuple[DsFlag, ...] = (
    DsFlag(
        ("--num_nodes",), "ds_num_nodes", "--num-nodes", "num_nodes", type=Whole(-1, MAX_WORLD_SIZE), convert=_minus_one
    ),
    DsFlag(
        ("--num_gpus",),
        "ds_num_gpus",
        "--nproc-per-node",
        "nproc_per_node",
        type=Whole(-1, MAX_WORLD_SIZE),
        convert=_minus_one,
        note="checked against the hostfile's slots",
    ),
    DsFlag(
        ("--num_accelerators",),
        "ds_num_accelerators",
        "--nproc-per-node",
        "nproc_per_node",
        type=Whole(-1, MAX_WORLD_SIZE),
        convert=_minus_one,
        note="checked against the hostfile's slots",
    ),
    DsFlag(("--master_addr",), "ds_master_addr", "--master-addr", "master_addr", convert=_none_string),
    DsFlag(("--master_port",), "ds_master_port", "--master-port", "master_port", type=Whole(0, 65535)),
    DsFlag(
        ("--node_rank",), "ds_node_rank", "--node-rank", "node_rank", type=Whole(-1, MAX_WORLD_SIZE), convert=_minus_one
    ),
    DsFlag(("--launcher_args",), "ds_launcher_args", "--launcher-args", "launcher_args"),
    DsFlag(("--no_python",), "ds_no_python", "--no-python", "no_python", is_flag=True),
    DsFlag(
        ("--no_local_rank",),
        "ds_no_local_rank",
        "(the default; --local-rank-arg turns it on)",
        "local_rank_arg",
        is_flag=True,
        convert=lambda _v: False,
        v1_option="--local-rank-arg",
        note="dslaunch appends --local_rank=N only with --local-rank-arg",
    ),
    DsFlag(
        ("--no_ssh",),
        "ds_no_ssh",
        "--node-rank N",
        is_flag=True,
        note="--node-rank N alone starts only this node's agent and never opens ssh",
    ),
    DsFlag(
        ("--no_ssh_check",),
        "ds_no_ssh_check",
        "",
        is_flag=True,
        note="it has no effect: dslaunch runs no separate ssh check",
    ),
    DsFlag(("--force_multi",), "ds_force_multi", "--force-multi", "force_multi", is_flag=True),
    DsFlag(
        ("--save_pid",),
        "ds_save_pid",
        "--save-pid PATH",
        "save_pid",
        is_flag=True,
        convert=_pid_path,
        note="the launcher's pid goes to /tmp/<launcher pid>.deepspeed, removed when the job ends",
    ),
    DsFlag(
        ("--enable_each_rank_log",),
        "ds_enable_each_rank_log",
        "--log-dir",
        "log_dir",
        convert=_none_string,
        note="files are DIR/rank<N>.stdout.log and DIR/rank<N>.stderr.log",
    ),
    DsFlag(
        ("--bind_cores_to_rank",),
        "ds_bind_cores_to_rank",
        "--bind-cores-to-rank",
        "bind_cores_to_rank",
        is_flag=True,
        note="the default core list is the node's usable cores (CPU affinity)",
    ),
    DsFlag(("--bind_core_list",), "ds_bind_core_list", "--bind-core-list", "bind_core_list"),
    DsFlag(("--ssh_port",), "ds_ssh_port", "--ssh-port", "ssh_port", type=Whole(1, 65535)),
    DsFlag(("--venv_script",), "ds_venv_script", "--venv-script", "venv_script"),
    DsFlag(
        ("--log_level",),
        "ds_log_level",
        "--log-level",
        "log_level",
        type=click.Choice(["debug", "info", "warning", "error", "critical"], case_sensitive=False),
        convert=str.lower,
        note="the default is warning, and the level reaches every rank on every node",
    ),
    DsFlag(("-q", "--quiet"), "ds_quiet", "--log-level error", "log_level", is_flag=True, convert=lambda _v: "error"),
    DsFlag(
        ("--autotuning",),
        "ds_autotuning",
        "",
        type=click.Choice(["tune", "run"]),
        reject=True,
        note="the autotuner is part of DeepSpeed: run it with `deepspeed --autotuning ...`",
    ),
    DsFlag(("--elastic_training",), "ds_elastic_training", "", is_flag=True, note=_ELASTIC),
    DsFlag(("--min_elastic_nodes",), "ds_min_elastic_nodes", "--nnodes MIN:MAX", type=click.INT, note=_NODES),
    DsFlag(("--max_elastic_nodes",), "ds_max_elastic_nodes", "--nnodes MIN:MAX", type=click.INT, note=_NODES),
)

# DeepSpeed flags whose spelling is also the v1 one: the v1 option accepts them as they are.
SAME_SPELLING: tuple[str, ...] = ("-H", "--hostfile", "-i", "--include", "-e", "--exclude", "--launcher", "--module")

ACCEPTED: tuple[str, ...] = tuple(sorted({*SAME_SPELLING, *(name for f in TABLE for name in f.names)}))
_LONG = tuple(name[2:] for name in ACCEPTED if name.startswith("--"))


def expand_prefix(name: str) -> str:
    """A DeepSpeed option name (without its dashes) abbreviated as DeepSpeed's argparse parser allowed
    (``launcher_arg`` for ``launcher_args``), spelled out; anything else is left alone.

    Only DeepSpeed's spellings are matched, as in DeepSpeed; v1 options are spelled out in full. Short
    options (one letter once the dash is dropped) are never expanded.
    """
    if len(name) < 3 or name in _LONG:
        return name
    matches = [full for full in _LONG if full.startswith(name)]
    if len(matches) > 1:
        raise DslaunchError(f"ambiguous option --{name}: it could be {', '.join('--' + m for m in matches)}")
    return matches[0] if matches else name


def expand_abbreviations(args: Sequence[str], params: Sequence[click.Parameter]) -> list[str]:
    """``args`` with each abbreviated DeepSpeed option name before SCRIPT spelled out (:func:`expand_prefix`).

    Only option names are touched: not option values, not SCRIPT or anything after it (nor after ``--``).
    click's ``token_normalize_func`` cannot do this: click also runs it on every Choice value, so ``auto``
    became ``autotuning``. Which tokens are values follows click's parser: an option that takes a value takes
    the next token whatever it looks like.
    """
    takes_value = {
        opt: not (p.is_flag or p.count)
        for p in params
        if isinstance(p, click.Option)
        for opt in (*p.opts, *p.secondary_opts)
    }
    out, i = list(args), 0
    while i < len(out):
        token = out[i]
        if token == "--" or not token.startswith("-") or token == "-":
            break  # SCRIPT (or the end of options): the rest is the script's
        if token.startswith("--"):
            name, eq, value = token[2:].partition("=")
            out[i] = token = f"--{expand_prefix(name)}{eq}{value}"
            i += 2 if not eq and takes_value.get(token, False) else 1
            continue
        # -abc: flags, up to the first letter that takes a value, which takes the rest or the next token
        for k in range(1, len(token)):
            if takes_value.get(f"-{token[k]}", False):
                i += 1 if k + 1 < len(token) else 2
                break
        else:
            i += 1
    return out


def _metavar(flag: DsFlag) -> str | None:
    if flag.is_flag:
        return None
    if isinstance(flag.type, click.Choice):
        return f"[{'|'.join(map(str, flag.type.choices))}]"
    return "N" if isinstance(flag.type, Whole) or flag.type is click.INT else "VALUE"


def help_text(flag: DsFlag) -> str:
    """What ``--help`` says of ``flag``: the dslaunch option it becomes, or why it is ignored or refused."""
    if flag.reject:
        return f"Refused: {flag.note}."
    if not flag.v1:
        return f"Ignored: {flag.note}."
    use = flag.v1[1:-1] if flag.v1.startswith("(") else f"use {flag.v1}"
    return use[0].upper() + use[1:] + (f"; {flag.note}." if flag.note else ".")


# Hidden options (no DSLAUNCH_* variable of their own), listed all the same in --help's section of their own.
PARAMS: list[click.Parameter] = [
    Option(
        [*f.names, f.dest],
        section=DEEPSPEED,
        is_flag=f.is_flag,
        default=None if not f.is_flag else False,
        type=None if f.is_flag else f.type,
        metavar=_metavar(f),
        help=help_text(f),
        hidden=True,
        expose_value=True,
    )
    for f in TABLE
    if not f.external
]


def _spelling(flag: DsFlag) -> str:
    return "/".join(flag.names)


def message(flag: DsFlag) -> str:
    """The one warning (or error) shown when ``flag`` is used."""
    name = _spelling(flag)
    if flag.reject:
        return f"{name} is not supported by dslaunch: {flag.note}"
    if not flag.v1:
        return f"warning: {name} (DeepSpeed) is ignored: {flag.note}"
    text = f"warning: {name} is DeepSpeed's spelling; use {flag.v1}"
    return f"{text} ({flag.note})" if flag.note else text


def _given_on_cli(name: str) -> bool:
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return False
    try:
        source = ctx.get_parameter_source(name)
    except (KeyError, TypeError):
        return False
    return source is ParameterSource.COMMANDLINE  # a value from the environment yields to the command line


def _used(flag: DsFlag, values: dict[str, Any]) -> bool:
    value = values.get(flag.dest)
    return bool(value) if flag.is_flag else value is not None


def _apply(flag: DsFlag, values: dict[str, Any], applied: dict[str, DsFlag]) -> None:
    assert flag.target is not None
    value = flag.convert(values[flag.dest])
    if value is UNSET:
        return
    if flag.target not in values:
        raise DslaunchError(f"{_spelling(flag)} needs dslaunch's {flag.v1_name}, which this build does not have yet")
    earlier = applied.get(flag.target)
    if earlier is not None and values[flag.target] != value:
        raise DslaunchError(f"{_spelling(earlier)} and {_spelling(flag)} disagree: give only {flag.v1_name}")
    if _given_on_cli(flag.target) and values[flag.target] != value:
        raise DslaunchError(f"{_spelling(flag)} and {flag.v1_name} disagree: give only {flag.v1_name}")
    values[flag.target] = value
    applied[flag.target] = flag


def translate(values: dict[str, Any]) -> None:
    """Rewrite DeepSpeed spellings in ``values`` to the v1 options (warning once per flag), before parsing."""
    applied: dict[str, DsFlag] = {}
    for flag in TABLE:
        if flag.external or not _used(flag, values):
            continue
        if flag.reject:
            raise DslaunchError(message(flag))
        click.echo(f"dslaunch: {message(flag)}", err=True)
        if flag.target is not None:
            _apply(flag, values, applied)
    values["ds_elastic_range"] = _elastic_range(values)
    if str(values.get("launcher", "")).lower() in _NO_V1_LAUNCHERS:
        raise DslaunchError(
            f"DeepSpeed's {values['launcher']!r} launcher has no dslaunch equivalent: "
            "use --launcher openmpi or --launcher mpich (or auto)",
            option="--launcher",
        )
    if _used(_BY_DEST["ds_no_ssh"], values) and values.get("node_rank") is None:
        raise DslaunchError("--no_ssh needs --node_rank N (in dslaunch: --node-rank N): the rank of this node")


def _elastic_range(values: dict[str, Any]) -> tuple[int, int | None] | None:
    """DeepSpeed's --min/--max_elastic_nodes (-1: unset) as (MIN, MAX or None: every host of the hostfile)."""
    low, high = values.get("ds_min_elastic_nodes"), values.get("ds_max_elastic_nodes")
    low, high = (None if v is None or v == -1 else v for v in (low, high))
    if low is None and high is None:
        return None
    for name, v in (("--min_elastic_nodes", low), ("--max_elastic_nodes", high)):
        if v is not None and v < 1:
            raise DslaunchError(f"{name} {v}: give a node count from 1 (or -1 for unset)")
    return (low or 1), high


_BY_DEST = {f.dest: f for f in TABLE}
_NO_V1_LAUNCHERS = ("impi", "mvapich")
