"""Options kept for parity with the DeepSpeed launcher: --local_rank, core binding, pid file, forced multi-node."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from dslaunch.cli.help_sections import HOSTS, JOB, SLURM, Option
from dslaunch.errors import DslaunchError

PARAMS: list[click.Parameter] = [
    Option(
        ["--local-rank-arg"],
        section=JOB,
        is_flag=True,
        help="Append --local_rank=N to each rank's arguments, as DeepSpeed does by default.",
    ),
    Option(
        ["--bind-cores-to-rank"],
        section=JOB,
        is_flag=True,
        help="Give each rank an equal slice of the node's cores (numactl -C) and set OMP_NUM_THREADS to it.",
    ),
    Option(
        ["--bind-core-list"],
        section=JOB,
        metavar="LIST",
        help="Cores to split with --bind-cores-to-rank, e.g. '0-15,32-47' [default: the node's usable cores].",
    ),
    Option(
        ["--save-pid"],
        section=JOB,
        type=click.Path(dir_okay=False),
        metavar="PATH",
        help="Write the launcher's pid to PATH while the job runs (signal it to stop the whole job).",
    ),
    Option(
        ["--force-multi"],
        section=HOSTS,
        is_flag=True,
        help="Use a remote launcher (pdsh/ssh) even when the only host is this one.",
    ),
    Option(
        ["--launcher-args"],
        section=SLURM,
        metavar="ARGS",
        help="Extra arguments for the launcher program (mpirun, srun, pdsh), split like a shell would.",
    ),
]


@dataclass(frozen=True)
class ParityChoices:
    local_rank_arg: bool
    bind_cores: tuple[int, ...] | None  # None: no binding; (): the node's usable cores
    save_pid: str | None
    force_multi: bool
    launcher_args: tuple[str, ...]


def parse(values: Mapping[str, Any]) -> ParityChoices:
    return ParityChoices(
        local_rank_arg=bool(values.get("local_rank_arg")),
        bind_cores=_core_list(values),
        save_pid=values.get("save_pid") or None,
        force_multi=bool(values.get("force_multi")),
        launcher_args=split_launcher_args(values.get("launcher_args")),
    )


def split_launcher_args(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    import shlex

    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise DslaunchError(f"cannot split {raw!r}: {exc}", option="--launcher-args") from None


def _core_list(values: Mapping[str, Any]) -> tuple[int, ...] | None:
    text = values.get("bind_core_list")
    if not values.get("bind_cores_to_rank"):
        if text:
            raise DslaunchError("--bind-core-list needs --bind-cores-to-rank")
        return None
    from dslaunch.oslib import binding

    try:
        return binding.parse_core_list(text) if text else ()
    except binding.CoreListError as exc:
        raise DslaunchError(exc.message, option="--bind-core-list") from None


def check_core_list(cores: tuple[int, ...], most_ranks: int, *, need_numactl: bool) -> None:
    """Enough cores for the busiest node; numactl present when ranks start on this machine."""
    if cores and len(cores) < most_ranks:
        raise DslaunchError(
            f"{len(cores)} core(s) cannot give each of {most_ranks} ranks a core of its own", option="--bind-core-list"
        )
    import shutil  # with bz2 and lzma: only here

    if need_numactl and shutil.which("numactl") is None:
        raise DslaunchError("--bind-cores-to-rank needs numactl on PATH (apt-get install numactl)")


def write_pid_file(path: str) -> None:
    """Write the launcher's pid to ``path`` for the job's lifetime (a side effect: after the plan is frozen)."""
    path = os.path.abspath(path)
    # Written aside, then hard-linked into place: a reader never sees the file empty, and an
    # existing one is never replaced (link fails like open(..., "x") would).
    partial = f"{path}.{os.getpid()}.tmp"
    try:
        with open(partial, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
        os.link(partial, path)
    except FileExistsError:
        raise DslaunchError(f"pid file {path!r} already exists: is another job running?", option="--save-pid") from None
    except OSError as exc:
        raise DslaunchError(f"cannot write pid file {path!r}: {exc.strerror}", option="--save-pid") from None
    finally:
        try:
            os.unlink(partial)
        except OSError:
            pass

    def remove() -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    click.get_current_context().call_on_close(remove)
