"""Running inside an srun task: as the node agent of this task's node, or as one rank.

Node mode spawns the node agent for this node only and supervises it like
any runner. A failing node tells the other tasks of the step at once with
``scancel --signal=URG`` (ignored by default in every process, so only the
dslaunch tasks react); they stop their ranks and exit 1, so srun, which
reports the highest task code, ends the step with the failing rank's code.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping

from dslaunch.plan import LaunchPlan
from dslaunch.runners.local import LocalAgent
from dslaunch.runners.supervise import report, supervise
from dslaunch.slurm import layout
from dslaunch.slurm.step import node_rank_of, resolve_port

PEER_FAILED = signal.SIGURG
PEER_STOPPED_CODE = 1


def run_node(plan: LaunchPlan, env: Mapping[str, str] | None = None) -> int:
    """Be the node agent for this task's node; return the task's exit code."""
    env = os.environ if env is None else env
    plan = resolve_port(plan, env)
    node_rank = node_rank_of(plan, env)
    peer_failed: list[int] = []
    handle: StepAgent | None = None

    def on_peer_failure(_signum: int, _frame: object) -> None:
        peer_failed.append(1)
        if handle is not None:
            handle.stop()

    previous = signal.signal(PEER_FAILED, on_peer_failure)
    try:
        handle = StepAgent(plan, node_rank)
        outcome = supervise(plan, [handle])
    finally:
        signal.signal(PEER_FAILED, previous)
    if peer_failed and outcome.code:
        print(
            f"dslaunch: node {node_rank} ({plan.node(node_rank).host}) stopped: another node of the "
            "Slurm step failed (its log names the root cause)",
            file=sys.stderr,
            flush=True,
        )
        return PEER_STOPPED_CODE
    if outcome.code and outcome.root_cause is not None and len(plan.nodes) > 1:
        _tell_peers(env)
    return report(outcome, plan)


class StepAgent(LocalAgent):
    """This node's agent; USR1/USR2 are not relayed when Slurm signals every process of the step itself."""

    def __init__(self, plan: LaunchPlan, node_rank: int) -> None:
        super().__init__(plan, node_rank)
        self.relay_user_signals = not plan.slurm.signals_ranks

    def signal(self, signum: int) -> None:
        if self.relay_user_signals or signum not in (signal.SIGUSR1, signal.SIGUSR2):
            super().signal(signum)


def _tell_peers(env: Mapping[str, str]) -> None:
    scancel = shutil.which("scancel")
    job, step = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"), env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if scancel is None or not job or step is None:
        return
    try:
        subprocess.run(
            [scancel, "--quiet", f"--signal={PEER_FAILED.name[3:]}", f"{job}.{step}"],
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # best effort: tasks that already ended make scancel complain
    except (OSError, subprocess.TimeoutExpired):
        pass


def exec_rank(plan: LaunchPlan, env: Mapping[str, str] | None = None) -> None:
    """Become the rank this task stands for (never returns)."""
    from dslaunch.agent import ranks as rankspec

    env = os.environ if env is None else env
    plan = resolve_port(plan, env)
    step = layout.read_step(env)
    node = plan.node(step.nodeid)
    local = step.localid
    error_file = os.path.join(plan.log_dir, f"rank{node.ranks[local]}.error.json") if plan.log_dir else ""
    rank_environ = rankspec.rank_env(plan, node, local, env, error_file)
    if not error_file:  # TORCHELASTIC_ERROR_FILE stays "", as torchrun sets it without a log dir
        rank_environ.pop("DSLAUNCH_ERROR_FILE", None)
    # Slurm's numbering, also under --distribution=cyclic (the plan numbers ranks node by node).
    rank_environ["RANK"] = rank_environ["ROLE_RANK"] = str(step.procid)
    if "CUDA_VISIBLE_DEVICES" in env:
        rank_environ["CUDA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"]  # Slurm's GPU binding wins
    else:
        rank_environ.pop("CUDA_VISIBLE_DEVICES", None)
    argv = rankspec.rank_argv(plan, local)
    sys.stdout.flush()
    sys.stderr.flush()
    if plan.cwd:
        os.chdir(plan.cwd)
    os.execvpe(argv[0], argv, rank_environ)
