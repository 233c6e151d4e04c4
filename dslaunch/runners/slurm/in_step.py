"""Running inside an srun task: as the node agent of this task's node, or as one rank.

Node mode spawns the node agent for this node only and supervises it like
any runner. A failing node tells the other tasks of the step at once with
``scancel --signal=URG`` (ignored by default in every process, so only the
dslaunch tasks react); they stop their ranks and exit 1, so srun, which
reports the highest task code, ends the step with the failing rank's code.
A requested stop's step is agreed across the tasks by node 0's (``stop_channel.py``).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from dslaunch import wire
from dslaunch.channel import secret
from dslaunch.errors import DslaunchError
from dslaunch.job.loop import report, supervise
from dslaunch.job.result import JobResult
from dslaunch.job.state import Outcome, lost_node_code
from dslaunch.observe.session import status_line_of
from dslaunch.oslib import port_holders, prctl
from dslaunch.plan import LaunchPlan
from dslaunch.runners.forked import LocalAgent
from dslaunch.runners.slurm import peer_signal
from dslaunch.runners.slurm.stop_channel import Hub, Spoke
from dslaunch.slurmlib import layout
from dslaunch.slurmlib.task_plan import node_rank_of, resolve_port

if TYPE_CHECKING:
    from dslaunch.agent.preload.client import Zygote
    from dslaunch.agent.preload.warm import WarmZygotes
    from dslaunch.observe.session import Observer
    from dslaunch.output.status_line import StatusLine

# --launcher slurm's launcher turns its SIGQUIT into this, for every process of the step: ignored by default
# everywhere, so only the dslaunch tasks react (a SIGQUIT would kill the ranks' children, srun aborts on it).
STACKS_REQUEST = signal.SIGWINCH
# --launcher slurm's launcher turns a requested stop into this, for every process of the step: it does nothing to
# a process that is not stopped, so only the dslaunch tasks react (a SIGTERM from Slurm would reach every rank's
# DataLoader workers too); each task asks its agent, which signals each rank's main process (docs/stopping.md).
# Only a task of --launcher slurm's own step listens: in a user's srun step, a SIGCONT comes from Slurm (before its
# SIGTERM when it ends the step, or a resume).
STOP_REQUEST = signal.SIGCONT
PEER_STOPPED_CODE = 1


SETTLE = 2.0  # before a restart, this long without a peer's signal: none of the last attempt's is still coming


@dataclass
class _Peers:
    """This task's view of the step's other tasks, kept across attempts (restarts)."""

    current: StepAgent | None = None
    told: bool = False  # this task told the others its node failed, in the current attempt
    quiet_stop: bool = False  # the stop came as STOP_REQUEST: Slurm signalled no rank, the agent must
    warm: WarmZygotes | None = None  # --preload with restarts: this node's zygote, kept for every attempt
    channel: Hub | Spoke | None = None  # the step's stop channel (None: one node, or none could be opened)

    def stop_current(self) -> None:
        if self.current is not None:
            self.current.stop()


_peers = _Peers()


def attempt_in_step(
    plan: LaunchPlan, env: Mapping[str, str] | None = None, *, last: bool = False, observer: Observer | None = None
) -> JobResult:
    """Be the node agent for this task's node for one attempt; return how it ended.

    With restarts, every task runs its own attempts: a failing node tells the others at once
    (``scancel --signal=URG``), each stops its ranks, and each starts the next attempt once no
    such signal has come for ``SETTLE`` seconds, so a late one cannot stop the new attempt.
    ``last``: this process exits after this attempt (srun mode's task), so a SIGTERM after it stays harmless.
    ``observer``: the job's, where this task's dslaunch has one (node mode).
    """
    env = os.environ if env is None else env
    plan = resolve_port(plan, env)
    node_rank = node_rank_of(plan, env)
    peer_signal.listen_in_step(env)  # the CLI did already: a direct caller too
    peer_signal.on_heard(_peers.stop_current)
    since = -math.inf  # attempt 0: a peer's failure heard at any time, even before the handler ran this
    if plan.restarts.count:
        while (wait := peer_signal.heard_at() + SETTLE - time.monotonic()) > 0:
            time.sleep(wait)
        since = time.monotonic()
    if _peers.warm is None:
        from dslaunch.agent.preload.warm import WarmZygotes

        prctl.load()
        prctl.set_child_subreaper()  # what a killed agent's ranks left behind comes to this task (LocalAgent.wait)
        _peers.channel = _open_channel(plan, node_rank)  # before any fork: its threads start here
        _peers.warm = WarmZygotes()
    _peers.warm.prepare(plan, node_rank)
    if peer_signal.heard_at() > since:  # a peer failed before this node could start its ranks
        return _stopped_by_peer(plan, node_rank, retry=True)
    _peers.told = _peers.quiet_stop = False
    stacks = signal.signal(STACKS_REQUEST, _ask_for_stacks)
    asked = signal.signal(STOP_REQUEST, _ask_to_stop if plan.slurm.mode == "srun" else signal.SIG_DFL)
    late = _LateTerm(signal.getsignal(signal.SIGTERM))  # a SIGTERM once supervise() has returned: see _after
    signal.signal(signal.SIGTERM, late)
    try:
        channel = _peers.channel
        _peers.current = _new_agent(plan, node_rank, env, observer)
        if channel is not None:
            channel.begin(plan.restarts.count, _peers.current.stop_at)
        if peer_signal.heard_at() > since:  # heard while there was no agent to stop yet
            _peers.current.stop()
        outcome = supervise(plan, [_peers.current], None, observer, decides_stop_step=channel is None)
    finally:
        signal.signal(STACKS_REQUEST, stacks)
        signal.signal(STOP_REQUEST, asked)
        _peers.current = None
    late.ended = True
    _say_notes(_peers.channel)
    try:
        result = _quiet_stop_ends_at_zero(_after(outcome, plan, env, since), outcome)
    finally:
        if not last:
            signal.signal(signal.SIGTERM, late.previous)
    # Each task decides its own restarts and only the failing one knows the failure: without the failures, no task
    # applies the repeat or --no-restart-on rules, so every task restarts as the others do (docs/restarts.md).
    result = replace(result, failures=())
    return replace(result, retry=False) if late.seen else result


def _new_agent(plan: LaunchPlan, node_rank: int, env: Mapping[str, str], observer: Observer | None) -> StepAgent:
    """This attempt's agent: it tells the other tasks when a rank of its node fails on its own, and draws the job's
    status line where it is its console's one writer."""
    zygotes = _peers.warm.zygotes if _peers.warm is not None else None
    return StepAgent(
        plan,
        node_rank,
        on_failure=lambda: _tell_once(plan, env),
        warm=zygotes,
        channel=_peers.channel,
        status_line=status_line_of(observer),
    )


class _LateTerm:
    """SIGTERM outside supervise(): handled as before until the attempt ended, then only recorded."""

    def __init__(self, previous: Callable[[int, FrameType | None], Any] | int | None) -> None:
        self.previous = previous
        self.ended = False
        self.seen = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.ended:
            self.seen = True
        elif callable(self.previous):
            self.previous(signum, frame)
        elif self.previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)  # dies as it would have


def _after(outcome: Outcome, plan: LaunchPlan, env: Mapping[str, str], since: float) -> JobResult:
    """The attempt's result, once this node's ranks are down; this node's own failure is told to the others.

    Told, the others stop and exit 1 at once, and srun's --kill-on-bad-exit SIGTERMs this task while it
    still reports: that SIGTERM is recorded, not fatal (:class:`_LateTerm`), or srun would end
    with 143 instead of the failing rank's code (or this node's lost-agent code).
    """
    node_rank = node_rank_of(plan, env)
    peer_failed = peer_signal.heard_at() > since and not _peers.told
    if peer_failed and outcome.code:  # also when Slurm's --kill-on-bad-exit SIGTERM came first: exit 1, not 143
        return _stopped_by_peer(plan, node_rank, retry=outcome.signal is None)
    if outcome.code and (outcome.root_cause is not None or outcome.lost_node is not None):
        _tell_once(plan, env)
    return report(_without_kill_on_bad_exit(outcome), plan)


def _quiet_stop_ends_at_zero(result: JobResult, outcome: Outcome) -> JobResult:
    """A stop --launcher slurm's launcher asked for (STOP_REQUEST alone): this task exits 0, and that launcher
    128+N. A task's 143 would make srun --kill-on-bad-exit end the step, other nodes' ranks in the middle of their
    save. Not when Slurm sent its own SIGTERM too (a cancelled job: SIGCONT, then SIGTERM): 128+N then."""
    if result.stopped_by is None or not _peers.quiet_stop or outcome.stop_signals != 1:
        return result
    return replace(result, code=0)


def _stopped_by_peer(plan: LaunchPlan, node_rank: int, *, retry: bool) -> JobResult:
    print(
        f"dslaunch: node {node_rank} ({plan.node(node_rank).host}) stopped: another node of the "
        "Slurm step failed (its log names the root cause)",
        file=sys.stderr,
        flush=True,
    )
    return JobResult(PEER_STOPPED_CODE, "another node of the Slurm step failed", retry=retry)


def _without_kill_on_bad_exit(outcome: Outcome) -> Outcome:
    """The outcome without a SIGTERM that came after this node had failed and told the others.

    The peers stop at once and exit 1; srun's --kill-on-bad-exit then SIGTERMs this task while it
    is still tearing down, and srun would report 143 instead of the failing rank's code.
    """
    failed = outcome.root_cause is not None or outcome.lost_node is not None
    if outcome.signal == signal.SIGTERM and failed and _peers.told:
        return replace(outcome, code=_code_without_signal(outcome), signal=None)
    return outcome


def _code_without_signal(outcome: Outcome) -> int:
    if outcome.root_cause is not None:
        return outcome.root_cause.code
    assert outcome.lost_node is not None
    return lost_node_code(outcome.lost_node[2])


def _ask_for_stacks(_signum: int, _frame: object) -> None:
    if signal.getsignal(wire.STACKS_SIGNAL) not in (signal.SIG_DFL, signal.SIG_IGN, None):  # supervise() is running
        os.kill(os.getpid(), wire.STACKS_SIGNAL)


def _ask_to_stop(_signum: int, _frame: object) -> None:
    if signal.getsignal(wire.STACKS_SIGNAL) not in (signal.SIG_DFL, signal.SIG_IGN, None):  # supervise() is running
        _peers.quiet_stop = True
        os.kill(os.getpid(), signal.SIGTERM)


def _tell_once(plan: LaunchPlan, env: Mapping[str, str]) -> None:
    if not _peers.told and len(plan.nodes) > 1:
        _peers.told = True
        _tell_peers(env)
        if (left := peer_signal.start_window_left()) > 0:  # a peer's task may not listen yet (peer_signal.py)
            threading.Thread(target=_tell_again, args=(env, left), name="dslaunch-tell-peers", daemon=True).start()


def _tell_again(env: Mapping[str, str], left: float) -> None:
    end = time.monotonic() + left
    while (wait := end - time.monotonic()) > 0:
        time.sleep(min(1.0, wait))
        _tell_peers(env)


def _open_channel(plan: LaunchPlan, node_rank: int) -> Hub | Spoke | None:
    """The step's stop channel, node 0's side or another's (None: one node, or node 0's port is taken); the job's
    secret is taken out of this task's environment first, so no rank inherits it."""
    if len(plan.nodes) < 2:
        return None
    try:
        given = secret.take(os.environ)
    except DslaunchError as exc:
        _warn(f"{exc}: the nodes' stop steps are not agreed (each node decides its own)")
        return None
    key, ports = secret.key(given, plan.run_id), layout.stop_channel_ports(plan.master_port)
    if node_rank:
        host = plan.master_addr
        return Spoke(key, plan.run_id, (node_rank, plan.node(node_rank).host), [(host, p) for p in ports])
    try:
        hub = _listen(key, plan, ports)
    except OSError as exc:
        held = port_holders.describe(ports[0])
        why = f"{exc.strerror or exc}{'; port ' + str(ports[0]) + ' ' + held if held else ''}"
        _warn(f"cannot listen on ports {', '.join(map(str, ports))} ({why}): each node decides its own stop step")
        return None
    if hub.port != ports[0]:
        held = port_holders.describe(ports[0])
        _warn(
            f"the stop channel's port {ports[0]} is in use{' (' + held + ')' if held else ''}: it listens on {hub.port}"
        )
    if given is None:
        _warn(
            f"the nodes' stop channel (port {hub.port}) is not authenticated: give the step's tasks a "
            f"{secret.SECRET_VAR}, e.g. export {secret.SECRET_VAR}=$(openssl rand -hex 32) in the batch script "
            "(docs/slurm.md)"
        )
    return hub


def _listen(key: bytes, plan: LaunchPlan, ports: tuple[int, ...]) -> Hub:
    """Node 0's side, on the first of ``ports`` that binds; all in use are tried again for a few seconds (a
    previous step's task still exiting)."""
    end = time.monotonic() + 5.0
    while True:
        for port in ports:
            try:
                return Hub(key, plan.run_id, len(plan.nodes), port)
            except OSError:
                if port == ports[-1] and time.monotonic() >= end:
                    raise
        time.sleep(0.2)


def _warn(text: str) -> None:
    print(f"dslaunch: warning: {text}", file=sys.stderr, flush=True)


def _say_notes(channel: Hub | Spoke | None) -> None:
    """What the channel's threads noted (they print nothing themselves: an agent may be forked meanwhile)."""
    while channel is not None and channel.notes:
        _warn(channel.notes.pop(0))


class StepAgent(LocalAgent):
    """This node's agent; USR1/USR2 are not relayed when Slurm signals every process of the step itself.

    ``on_failure`` runs as soon as a rank of this node fails on its own (not stopped by the agent); ``channel``:
    the step's stop channel, which this node's stop step proposals go to.
    """

    def __init__(
        self,
        plan: LaunchPlan,
        node_rank: int,
        *,
        on_failure: Callable[[], None] | None = None,
        warm: Mapping[int, Zygote | None] | None = None,
        channel: Hub | Spoke | None = None,
        status_line: StatusLine | None = None,
    ) -> None:
        super().__init__(plan, node_rank, warm, status_line)
        self.relay_user_signals = not plan.slurm.signals_ranks
        self.stop_signum = plan.stop_signum
        self._on_failure = on_failure
        self._channel = channel

    def lines(self) -> Iterator[str]:
        for line in super().lines():
            if self._on_failure is not None or self._channel is not None:
                event = wire.decode(line)
                if isinstance(event, wire.RankExit) and event.failed and not event.by_agent and self._on_failure:
                    self._on_failure()
                if isinstance(event, wire.StopStep) and self._channel is not None:
                    self._channel.propose(event.step)
            yield line

    def signal(self, signum: int) -> None:
        if self.relay_user_signals or signum not in wire.FORWARDED_SIGNALS:
            super().signal(signum)

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        """Not when Slurm signalled every process of the step (scancel, a time limit): the agent heard it too,
        and its ranks, which must not hear it twice."""
        if self.relay_user_signals or _peers.quiet_stop or signum == self.stop_signum:
            super().request_stop(signum, now=now)


def _tell_peers(env: Mapping[str, str]) -> None:
    scancel = shutil.which("scancel")
    job, step = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"), env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if scancel is None or not job or step is None:
        return
    try:
        subprocess.run(
            [scancel, "--quiet", f"--signal={peer_signal.PEER_FAILED.name[3:]}", f"{job}.{step}"],
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
    from dslaunch.agent.ranks import rank_argv, rank_env

    env = os.environ if env is None else env
    plan = resolve_port(plan, env)
    step = layout.read_step(env)
    node = plan.node(step.nodeid)
    local = step.localid
    error_file = os.path.join(plan.log_dir, f"rank{node.ranks[local]}.error.json") if plan.log_dir else ""
    rank_environ = rank_env(plan, node, local, env, error_file)
    if not error_file:  # TORCHELASTIC_ERROR_FILE stays "", as torchrun sets it without a log dir
        rank_environ.pop("DSLAUNCH_ERROR_FILE", None)
    # Slurm's numbering, also under --distribution=cyclic (the plan numbers ranks node by node).
    rank_environ["RANK"] = rank_environ["ROLE_RANK"] = str(step.procid)
    if "CUDA_VISIBLE_DEVICES" in env:
        rank_environ["CUDA_VISIBLE_DEVICES"] = env["CUDA_VISIBLE_DEVICES"]  # Slurm's GPU binding wins
    else:
        rank_environ.pop("CUDA_VISIBLE_DEVICES", None)
    argv = rank_argv(plan, local)
    sys.stdout.flush()
    sys.stderr.flush()
    if plan.cwd:
        os.chdir(plan.cwd)
    os.execvpe(argv[0], argv, rank_environ)
