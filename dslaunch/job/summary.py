"""The words for how an attempt ended (pure): the failure summary for stderr and the one-line cause, and what of it
the next attempt's decision needs (the hosts to blame, the ranks that failed, whether a step was reached)."""

from __future__ import annotations

import signal

from dslaunch import wire
from dslaunch.job import hang
from dslaunch.job.restart_policy import exception_of
from dslaunch.job.result import RankFailure
from dslaunch.job.state import Outcome
from dslaunch.plan import LaunchPlan
from dslaunch.wire import RankExit


def _how(cause: RankExit) -> str:
    return f"was killed by {cause.signal}" if cause.signal else f"exited with code {cause.code}"


def _stop_words(outcome: Outcome) -> str:
    if outcome.stopped_by is not None:
        return f"stopped by {signal.Signals(outcome.stopped_by).name} (requested)"
    assert outcome.signal is not None
    return f"dslaunch received {signal.Signals(outcome.signal).name}"


def cause_line(outcome: Outcome) -> str:
    """What ended the attempt, in a few words ("" on success)."""
    if outcome.code == 0 and outcome.stopped_by is None:
        return ""
    if outcome.signal is not None or outcome.stopped_by is not None:
        return _stop_words(outcome)
    if outcome.hang is not None:
        culprits = [str(rank) for rank, _host in outcome.hang.culprits[:8]]
        named = f"rank{'s' if len(culprits) > 1 else ''} {', '.join(culprits)}" if culprits else "unknown"
        return f"hang: no progress for {outcome.hang.timeout:g} s (least progress: {named})"
    cause = outcome.root_cause
    if cause is not None:
        how = _how(cause)
        return f"rank {cause.rank} on {cause.host} {how}"
    if outcome.lost_node is not None:
        how = f": {outcome.lost_why}" if outcome.lost_why else ""
        return f"node {outcome.lost_node[0]} ({outcome.lost_node[1]}) disappeared{how}"
    return f"a node agent failed with exit code {outcome.code}"


def blamed_hosts(outcome: Outcome) -> tuple[tuple[str, str], ...]:
    """The host that failed as a node (its agent or connection lost), with why; a rank's failure blames none."""
    if outcome.lost_node is None or outcome.root_cause is not None or outcome.signal is not None:
        return ()
    _node_rank, host, status = outcome.lost_node
    signame = wire.exit_code_of(status)[1] if status else None
    how = f"killed by {signame}" if signame else f"status {status}"
    return ((host, f"its node agent or connection was lost ({how})"),)


def failures_of(outcome: Outcome) -> tuple[RankFailure, ...]:
    """The ranks of ``outcome`` that failed on their own (not stopped by dslaunch), the root cause first."""
    own = [e for e in outcome.exits if e.failed and not e.by_agent]
    if outcome.root_cause is not None and outcome.root_cause not in own:
        own.append(outcome.root_cause)
    own.sort(key=lambda e: (e is not outcome.root_cause, e.ts))
    return tuple(RankFailure(e.rank, e.host, e.code, exception_of(e.error)) for e in own)


def stepped(outcome: Outcome) -> bool:
    """Whether any rank of the attempt reached a step: it made a progress beat before it ended."""
    return any(e.beats for e in outcome.exits)


def format_summary(outcome: Outcome, plan: LaunchPlan) -> str | None:
    """A short, human summary of a failed or stopped run for stderr; None on success."""
    if outcome.stopped_by is not None:
        return stop_summary(outcome, plan)
    if outcome.code == 0:
        return None
    lines: list[str] = []
    if outcome.signal is not None:
        name = signal.Signals(outcome.signal).name
        lines.append(f"dslaunch: received {name}; stopped all {plan.world_size} ranks (exit {outcome.code})")
    cause = outcome.root_cause
    if outcome.hang is not None and outcome.signal is None:
        lines.extend(hang.summary(outcome.hang, plan, outcome.code))
    elif cause is not None:
        how = _how(cause)
        lines.append(
            f"dslaunch: job failed: rank {cause.rank} (local_rank {cause.local_rank}, node {cause.node_rank}) "
            f"on host {cause.host} {how} [root cause: first failure]"
        )
        detail = (cause.error or "").rstrip("\n").splitlines() or list(cause.stderr_tail)
        if detail:
            label = (
                ("traceback" if cause.error.startswith("Traceback") else "error")
                if cause.error
                else "last stderr lines"
            )
            lines.append(f"  {label}:")
            lines.extend(f"  | {text}" for text in detail[-20:])
        if any("EADDRINUSE" in text or "ddress already in use" in text for text in detail):
            lines.append(
                f"dslaunch: hint: the rendezvous port {plan.master_port} on {plan.master_addr} is taken (another "
                "job?): give another --master-port, or --master-port 0 for a free one"
            )
        others = sum(1 for e in outcome.exits if e.by_agent)
        if others:
            lines.append(f"dslaunch: {others} other rank(s) were stopped because of it")
    elif outcome.lost_node is not None and outcome.lost_why:
        node_rank, host, _status = outcome.lost_node
        lines.append(f"dslaunch: pod {node_rank} ({host}) was lost: {outcome.lost_why}; every pod's ranks were stopped")
    elif outcome.lost_node is not None:
        node_rank, host, status = outcome.lost_node
        signame = wire.exit_code_of(status)[1] if status else None
        how = f"was killed by {signame}" if signame else f"ended (status {status})"
        lines.append(
            f"dslaunch: node {node_rank} ({host}) disappeared: its agent {how} "
            "without reporting; all other nodes were stopped"
        )
    elif outcome.signal is None:
        lines.append(f"dslaunch: job failed with exit code {outcome.code}")
    return "\n".join(lines)


def stop_summary(outcome: Outcome, plan: LaunchPlan) -> str:
    """What a requested stop came to: ``dslaunch: stopped by SIGTERM (exit 143); 16 of 16 ranks exited 0 within
    4.2 s of the request``, and the ranks that did not."""
    assert outcome.stopped_by is not None
    name = signal.Signals(outcome.stopped_by).name
    last = {e.rank: e for e in outcome.exits}  # a rank's last word (one exit each, in practice)
    ranks = plan.world_size
    if plan.transport.supervises_own_node and outcome.exits:  # a Slurm task or a member pod: its own node alone
        own = plan.node(plan.manual_node if plan.manual_node is not None else outcome.exits[0].node_rank)
        ranks = own.nproc
        last = {rank: e for rank, e in last.items() if e.node_rank == own.node_rank}
    clean = [e for e in last.values() if not e.failed]
    within = ""
    at = outcome.stop_requested_at
    if at is not None and clean:
        within = f" within {max(0.0, max(e.ts for e in clean) - at):.1f} s of the request"
    lines = [f"dslaunch: stopped by {name} (exit {outcome.code}); {len(clean)} of {ranks} ranks exited 0{within}"]
    others = sorted((e for e in last.values() if e.failed), key=lambda e: e.rank)
    for e in others[:8]:
        lines.append(f"  rank {e.rank} on {e.host} {_how(e)}")
    if len(others) > 8:
        lines.append(f"  ... and {len(others) - 8} more")
    missing = ranks - len(last)
    if missing > 0:
        lines.append(f"  {missing} rank(s) reported no exit")
    return "\n".join(lines)
