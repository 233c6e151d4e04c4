"""Options kept for parity with the DeepSpeed launcher: --local_rank, core binding, pid file, forced multi-node."""

from __future__ import annotations

import os
import shlex
import shutil
from dataclasses import replace
from typing import Any

import click

from dslaunch import binding
from dslaunch.cli.core_options import LOCAL_NAMES
from dslaunch.cli.draft import PlanDraft

REMOTE_LAUNCHERS = ("pdsh", "ssh")  # what --force-multi picks, in choose_launcher's order
LAUNCHER_ARGS_USERS = ("openmpi", "mpich", "slurm")  # runners that read runner_options["launcher_args"]

PARAMS: list[click.Parameter] = [
    click.Option(
        ["--local-rank-arg"],
        is_flag=True,
        help="Append --local_rank=N to each rank's arguments, as DeepSpeed does by default.",
    ),
    click.Option(
        ["--bind-cores-to-rank"],
        is_flag=True,
        help="Give each rank an equal slice of the node's cores (numactl -C) and set OMP_NUM_THREADS to it.",
    ),
    click.Option(
        ["--bind-core-list"],
        metavar="LIST",
        help="Cores to split with --bind-cores-to-rank, e.g. '0-15,32-47' [default: the node's usable cores].",
    ),
    click.Option(
        ["--save-pid"],
        type=click.Path(dir_okay=False),
        metavar="PATH",
        help="Write the launcher's pid to PATH while the job runs (signal it to stop the whole job).",
    ),
    click.Option(
        ["--force-multi"], is_flag=True, help="Use a remote launcher (pdsh/ssh) even when the only host is this one."
    ),
    click.Option(
        ["--launcher-args"],
        metavar="ARGS",
        help="Extra arguments for the launcher program (mpirun, srun, pdsh), split like a shell would.",
    ),
]


def _shown(launcher: str) -> str:
    return "auto (local, pdsh or ssh here)" if launcher == "auto" else launcher


def _core_list(values: dict[str, Any], draft: PlanDraft) -> list[int] | None:
    text = values.get("bind_core_list")
    if not values.get("bind_cores_to_rank"):
        if text:
            raise click.UsageError("--bind-core-list needs --bind-cores-to-rank")
        return None
    try:
        cores = list(binding.parse_core_list(text)) if text else []
    except binding.CoreListError as exc:
        raise click.BadParameter(str(exc), param_hint="'--bind-core-list'") from None
    most = max(node.nproc for node in draft.nodes)
    if cores and len(cores) < most:
        raise click.BadParameter(
            f"{len(cores)} core(s) cannot give each of {most} ranks a core of its own", param_hint="'--bind-core-list'"
        )
    local_only = draft.launcher in ("auto", "local") and all(n.host in LOCAL_NAMES for n in draft.nodes)
    if local_only and not draft.dry_run and shutil.which("numactl") is None:
        raise click.UsageError("--bind-cores-to-rank needs numactl on PATH (apt-get install numactl)")
    return cores


def _pid_file(path: str) -> None:
    path = os.path.abspath(path)
    # Written aside, then hard-linked into place: a reader never sees the file empty, and an
    # existing one is never replaced (link fails like open(..., "x") would).
    partial = f"{path}.{os.getpid()}.tmp"
    try:
        with open(partial, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
        os.link(partial, path)
    except FileExistsError:
        raise click.BadParameter(
            f"pid file {path!r} already exists: is another job running?", param_hint="'--save-pid'"
        ) from None
    except OSError as exc:
        raise click.BadParameter(f"cannot write pid file {path!r}: {exc.strerror}", param_hint="'--save-pid'") from None
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


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    if values.get("local_rank_arg"):
        assert draft.program is not None
        draft.program = replace(draft.program, local_rank_arg=True)
    cores = _core_list(values, draft)
    if cores is not None:
        draft.runner_options["bind_cores"] = cores
    if values.get("launcher_args"):
        try:
            draft.runner_options["launcher_args"] = shlex.split(values["launcher_args"])
        except ValueError as exc:
            raise click.BadParameter(
                f"cannot split {values['launcher_args']!r}: {exc}", param_hint="'--launcher-args'"
            ) from None
        if draft.launcher not in LAUNCHER_ARGS_USERS:
            click.echo(
                f"dslaunch: warning: --launcher-args is only used by the {', '.join(LAUNCHER_ARGS_USERS)} "
                f"launchers; ignored with --launcher {_shown(draft.launcher)}",
                err=True,
            )
    if values.get("force_multi") and draft.launcher == "auto":
        from dslaunch.runners import RUNNERS

        found = [name for name in REMOTE_LAUNCHERS if name in RUNNERS and (name != "pdsh" or shutil.which("pdsh"))]
        if not found:
            raise click.UsageError(
                f"--force-multi needs a remote launcher ({', '.join(REMOTE_LAUNCHERS)}); "
                f"known launchers: {', '.join(sorted(RUNNERS))}"
            )
        draft.launcher = found[0]
    if values.get("save_pid") and not draft.dry_run:
        _pid_file(values["save_pid"])
