"""``--launcher slurm``: srun one task per node from an allocation, or act inside an srun step.

The mode is the plan's ``slurm_mode`` runner option, set by ``cli/slurm_options``:
``srun`` (run the srun line and wait for it), ``node`` (this srun task is its
node's agent) or ``rank`` (this srun task becomes one rank).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys

from dslaunch.plan import LaunchPlan
from dslaunch.slurm import srun, step

_RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def srun_line(plan: LaunchPlan) -> list[str]:
    return srun.srun_argv(plan, exclude=plan.option("slurm_exclude", ()),
                          launcher_args=plan.option("slurm_launcher_args", ()))


class SlurmRunner:
    name = "slurm"

    def describe(self, plan: LaunchPlan) -> list[str]:
        mode = plan.option("slurm_mode", "srun")
        if mode == "srun":
            argv = srun_line(plan)
            return [shlex.join(argv[:-1]) + " <plan, base64 JSON>"]
        if mode == "node":
            node = step.node_rank_of(plan, _environ())
            return [f"this srun task is the node agent of node {node}: "
                    + shlex.join([plan.program.python, "-m", "dslaunch.agent", "--node-rank", str(node)])]
        from dslaunch.agent.ranks import rank_argv  # noqa: PLC0415

        return ["this srun task becomes its rank: " + shlex.join(rank_argv(plan, 0))]

    def run(self, plan: LaunchPlan) -> int:
        mode = plan.option("slurm_mode", "srun")
        if mode == "node":
            return step.run_node(plan)
        if mode == "rank":
            step.exec_rank(plan)
        return _run_srun(srun_line(plan))


def _environ() -> dict[str, str]:
    import os  # noqa: PLC0415

    return dict(os.environ)


def _run_srun(argv: list[str]) -> int:
    """Run srun in the foreground, relaying signals; its exit code is the step's."""
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _f: caught.append(signum)) for s in _RELAYED}
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    except OSError as exc:
        for s, h in previous.items():
            signal.signal(s, h)
        print(f"dslaunch: cannot run srun: {exc}", file=sys.stderr)
        return 1
    try:
        while True:
            try:
                code = proc.wait(0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            while caught:
                proc.send_signal(caught.pop(0))
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    if code < 0:
        return 128 - code
    return code
