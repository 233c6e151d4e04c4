"""``--launcher slurm``: srun one task per node from an allocation, or act inside an srun step.

The mode is the plan's ``slurm.mode``, set by ``cli/slurm_hosts``:
``srun`` (run the srun line and wait for it), ``node`` (this srun task is its
node's agent) or ``rank`` (this srun task becomes one rank).
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.channel import secret
from dslaunch.job.protocols import NodeAnswers, Runner
from dslaunch.job.result import START_FAILED, JobResult
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan
from dslaunch.runners.slurm import in_step
from dslaunch.runners.slurm.srun_stderr import SrunErrors
from dslaunch.slurmlib import lost_nodes, srun, task_plan
from dslaunch.slurmlib.step_code import step_code

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer

_STDERR_WAIT = 5.0  # after srun ended, for the rest of its stderr to be passed on
_RELAYED = (*wire.STOP_SIGNALS, *wire.FORWARDED_SIGNALS, wire.STACKS_SIGNAL)


def srun_line(plan: LaunchPlan) -> list[str]:
    return srun.srun_argv(
        plan,
        exclude=plan.slurm.exclude,
        launcher_args=plan.launcher_args,
        environ=os.environ,
        carry=(secret.SECRET_VAR, secret.SECRET_FILE_VAR),
    )


def step_env(plan: LaunchPlan, base: Mapping[str, str]) -> dict[str, str]:
    """srun's environment: the plan, and a secret of the step's own for its tasks' stop channel
    (``stop_channel.py``) where the user gave none."""
    env = srun.srun_env(plan, base)
    if not env.get(secret.SECRET_VAR) and not env.get(secret.SECRET_FILE_VAR):
        env[secret.SECRET_VAR] = secrets.token_hex(32)
    return env


class SlurmRunner(Runner):
    name = "slurm"

    def describe(self, plan: LaunchPlan) -> list[str]:
        mode = plan.slurm.mode
        if mode == "srun":
            return [shlex.join(srun_line(plan)) + f"  # plan in ${wire.PLAN_VAR}"]
        if mode == "node":
            node = task_plan.node_rank_of(plan, _environ())
            return [
                f"this srun task is the node agent of node {node}: "
                + shlex.join([plan.program.python, "-m", "dslaunch.agent", "--node-rank", str(node)])
            ]
        from dslaunch.agent.ranks import rank_argv

        return ["this srun task becomes its rank: " + shlex.join(rank_argv(plan, 0))]

    def probe(self, plan: LaunchPlan, hosts: list[str]) -> dict[str, str]:
        """Spares and node ranges: the hosts of the allocation that fail --preflight's checks, through srun."""
        from dslaunch.runners.preflight import probe_hosts

        return probe_hosts(plan, hosts, self.run_on_nodes)

    def run_on_nodes(self, plan: LaunchPlan, command: str) -> NodeAnswers:
        """One srun task on each node of ``plan`` (inside the allocation); its output names the node it ran on."""
        hosts = [n.host for n in plan.nodes]
        try:
            done = subprocess.run(
                srun.probe_argv(hosts, command, plan.run_id),
                capture_output=True,
                text=True,
                timeout=plan.remote.connect_timeout + 60,
                stdin=subprocess.DEVNULL,
            )
            outs = srun.probe_outputs(done.stdout)
            why = done.stderr.strip().splitlines() or [f"srun exit {done.returncode}"]
        except (OSError, subprocess.TimeoutExpired) as exc:
            outs, why = {}, [f"srun: {exc}"]
        return {
            n.node_rank: (0, outs[n.host], "") if n.host in outs else (None, "", f"no answer through srun ({why[-1]})")
            for n in plan.nodes
        }

    def address_of(self, plan: LaunchPlan, host: str) -> str:
        """The node's address in the allocation (slurmlib/address.py)."""
        from dslaunch.slurmlib.address import node_address

        return node_address(host, os.environ)

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        mode = plan.slurm.mode
        if mode == "node":
            return in_step.attempt_in_step(plan, observer=observer)
        if mode == "rank":
            in_step.exec_rank(plan)
        return _run_srun(srun_line(plan), plan, step_env(plan, os.environ))


def _environ() -> dict[str, str]:
    return dict(os.environ)


def _run_srun(argv: list[str], plan: LaunchPlan, env: dict[str, str]) -> JobResult:
    """Run srun in the foreground; its exit code is the step's.

    A first SIGINT/SIGTERM/SIGHUP becomes ``scancel --signal=TERM`` on the step, so ranks get
    a graceful SIGTERM (srun itself would SIGKILL them); a second one, or a step that does not
    end within the grace period, goes to srun, which then forces the step down.
    """
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _f: caught.append(signum)) for s in _RELAYED}
    try:
        prctl.load()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            # a SIGKILLed launcher must not leave the step running until the allocation ends: srun, told to stop,
            # ends the step (what a second Ctrl-C would do)
            preexec_fn=lambda: prctl.set_parent_death_signal(signal.SIGTERM),
        )
    except OSError as exc:
        for s, h in previous.items():
            signal.signal(s, h)
        print(f"dslaunch: cannot run srun: {exc}", file=sys.stderr)
        return JobResult(START_FAILED, f"cannot run srun: {exc}")
    assert proc.stderr is not None
    errors = SrunErrors(os.dup(proc.stderr.fileno()))
    proc.stderr.close()
    stop = _Stop()
    try:
        while True:
            try:
                code = proc.wait(0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            while caught:
                _relay(caught.pop(0), proc, plan, stop)
            if stop.deadline is not None and time.monotonic() > stop.deadline:
                stop.deadline = None
                proc.send_signal(signal.SIGTERM)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    srun_lines = errors.lines(_STDERR_WAIT)
    lost = lost_nodes.lost_nodes(srun_lines)
    if stop.signal is not None:
        name = signal.Signals(stop.signal).name
        code = 128 + stop.signal if plan.stop_exit_code is None else plan.stop_exit_code
        print(f"dslaunch: stopped by {name} (exit {code}); each node's summary is above", file=sys.stderr, flush=True)
        return JobResult(code, f"stopped by {name} (requested)", retry=False, stopped_by=stop.signal)
    code = 128 - code if code < 0 else step_code(code, srun_lines)
    if not code:
        return JobResult(0, "")
    cause = f"the srun step ended with exit {code}"
    if lost:
        cause += "; lost " + ", ".join(f"{host} ({why})" for host, why in lost)
    return JobResult(code, cause, blamed=lost)


@dataclass
class _Stop:
    signal: int | None = None  # the first stop signal dslaunch received
    deadline: float | None = None  # when srun itself is told, if the step has not ended by then
    graceless: bool = False  # the step had its SIGTERM (a second signal): the grace is over


def _relay(signum: int, proc: subprocess.Popen[bytes], plan: LaunchPlan, stop: _Stop) -> None:
    """What a signal to dslaunch becomes for the srun step: a first stop signal a quiet request to each task
    (``in_step.STOP_REQUEST``: each task's agent signals its ranks' main processes), a second SIGTERM to every
    process of the step, which ends the grace; a third, or a step still running at the deadline, goes to srun."""
    if signum in wire.FORWARDED_SIGNALS and signum != plan.stop_signum:
        proc.send_signal(signum)  # srun hands it to every process of the step
    elif signum == wire.STACKS_SIGNAL:  # srun would abort the step: ask each task for its node's stacks
        _signal_step(plan, str(int(in_step.STACKS_REQUEST)))  # scancel knows no WINCH by name
    elif stop.signal is None and _signal_step(plan, str(int(in_step.STOP_REQUEST))):
        stop.signal = signum
        stop.deadline = time.monotonic() + plan.stop_grace + plan.shutdown_timeout + 5.0
    elif not stop.graceless and _signal_step(plan, "TERM"):
        stop.signal, stop.graceless = stop.signal or signum, True
        stop.deadline = time.monotonic() + plan.shutdown_timeout + 5.0
    else:
        stop.signal = stop.signal or signum
        proc.send_signal(signal.SIGTERM)


def _signal_step(plan: LaunchPlan, name: str) -> bool:
    """Send signal ``name`` (TERM, or a number) to every process of our step (found by name); False if that failed."""
    job = os.environ.get("SLURM_JOB_ID") or os.environ.get("SLURM_JOBID")
    try:
        listing = subprocess.run(
            ["squeue", "-h", "-s", "-j", str(job), "-o", "%i %j"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
        steps = [line.split()[0] for line in listing.splitlines() if line.split()[1:] == [srun.step_name(plan)]]
        if not job or not steps:
            return False
        return (
            subprocess.run(
                ["scancel", f"--signal={name}", steps[0]], capture_output=True, timeout=10, check=False
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
