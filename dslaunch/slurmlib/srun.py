"""The srun line of ``--launcher slurm`` (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dslaunch import wire
from dslaunch.plan import LaunchPlan

# srun options dslaunch sets itself; passing them in --launcher-args would contradict the plan.
_OWNED = ("--nodes", "-N", "--ntasks-per-node", "--ntasks", "-n", "--nodelist", "-w")


def step_argv(plan: LaunchPlan) -> list[str]:
    """What each srun task runs: the in-step entry point, which finds the plan in its environment."""
    return [plan.program.python, "-m", "dslaunch.runners.slurm.task"]


def srun_env(plan: LaunchPlan, base: Mapping[str, str]) -> dict[str, str]:
    """srun's environment: the plan rides in ``wire.PLAN_VAR``, never on a command line."""
    return {**base, wire.PLAN_VAR: wire.plan_to_b64(plan)}


def export_option(base: Mapping[str, str], carry: Sequence[str] = ()) -> list[str]:
    """srun exports its whole environment unless SLURM_EXPORT_ENV narrows it: then add the plan's variable (and
    ``carry``'s: the job's secret for the stop channel)."""
    export = base.get("SLURM_EXPORT_ENV", "ALL")
    if export.split(",")[0] in ("ALL", ""):
        return []
    names = ",".join((wire.PLAN_VAR, *carry))
    return [f"--export={names}" if export == "NONE" else f"--export={export},{names}"]


def step_name(plan: LaunchPlan) -> str:
    """The srun step's name, so the launcher can find and signal its own step."""
    return f"dslaunch-{plan.run_id}"


def srun_argv(
    plan: LaunchPlan,
    *,
    exclude: Sequence[str] = (),
    launcher_args: Sequence[str] = (),
    srun: str = "srun",
    environ: Mapping[str, str] | None = None,
    carry: Sequence[str] = (),
) -> list[str]:
    """One task per node of the plan; Slurm kills the step when any task fails; ``carry``: variables the tasks
    need even where SLURM_EXPORT_ENV narrows what srun exports."""
    hosts = [node.host for node in plan.nodes]
    argv = [
        srun,
        f"--nodes={len(hosts)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(hosts)}",
        "--kill-on-bad-exit=1",
        f"--job-name={step_name(plan)}",
    ]
    if exclude:
        argv.append(f"--exclude={','.join(exclude)}")
    argv += export_option(environ or {}, carry)
    argv += list(launcher_args)
    return argv + step_argv(plan)


def owned_option(launcher_args: Sequence[str]) -> str | None:
    """The first srun option in ``launcher_args`` that dslaunch sets itself, if any."""
    for arg in launcher_args:
        name = arg.split("=", 1)[0]
        if name in _OWNED or (not name.startswith("--") and name[:2] in _OWNED):
            return arg
    return None


_NODE_MARK = "dslaunch-probe-node "


def probe_argv(hosts: Sequence[str], command: str, run_id: str, srun: str = "srun") -> list[str]:
    """One task per host running ``command`` (a shell line), each output line labelled with its task."""
    return [
        srun,
        f"--nodes={len(hosts)}",
        "--ntasks-per-node=1",
        f"--nodelist={','.join(hosts)}",
        "--kill-on-bad-exit=0",
        "--label",
        f"--job-name=dslaunch-probe-{run_id}",
        "sh",
        "-c",
        f'echo "{_NODE_MARK}$SLURMD_NODENAME"; exec {command}',
    ]


def probe_outputs(stdout: str) -> dict[str, str]:
    """The output of :func:`probe_argv`'s srun: each node's lines (without the labels), by node name."""
    by_task: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        task, sep, rest = line.partition(": ")
        if sep and task.strip().isdigit():
            by_task.setdefault(task.strip(), []).append(rest)
    found = {}
    for lines in by_task.values():
        names = [line.removeprefix(_NODE_MARK) for line in lines if line.startswith(_NODE_MARK)]
        if names:
            found[names[0]] = "\n".join(line for line in lines if not line.startswith(_NODE_MARK))
    return found
