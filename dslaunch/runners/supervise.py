"""Launcher-side supervision shared by every runner.

Each runner wraps its transport (a local subprocess, an ssh channel, ...) in
an :class:`AgentHandle`. :func:`supervise` relays the agents' output, reads
their events, stops every node as soon as one rank fails or an agent
vanishes, and turns what happened into one exit code and one summary.

One thread per handle reads its lines: events go to the main loop, output to a
bounded sink on our stdout (local agents write output themselves and send only
events). A full sink blocks that reader thread, never the main loop.
"""

from __future__ import annotations

import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from dslaunch import wire
from dslaunch.agent.sink import Sink, write_within
from dslaunch.plan import LaunchPlan
from dslaunch.runners import hang
from dslaunch.runners.result import JobResult
from dslaunch.wire import RankExit

STALL = 0.5  # while stopping (and for the summary), a reader that takes nothing this long is given up on

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)
_STACKS = signal.SIGQUIT  # every rank prints its stack; the job goes on (runners/hang.py)


class AgentHandle(Protocol):
    node_rank: int
    host: str

    def lines(self) -> Iterator[str]:
        """The agent's stream until it closes, in whole lines (newlines kept): an event line alone,
        output lines one or more at a time (``wire.split_events``)."""

    def stop(self) -> None:
        """Ask the agent to tear its node down (idempotent)."""

    def signal(self, signum: int) -> None:
        """Forward a signal (SIGUSR1/SIGUSR2; SIGQUIT: ask for the ranks' stacks) to the agent's ranks."""

    def kill(self) -> None:
        """Hard-stop the agent's transport."""

    def wait(self, timeout: float | None) -> int | None:
        """The agent's exit status, or None if still running after ``timeout``."""


@dataclass
class Outcome:
    code: int
    root_cause: RankExit | None = None
    lost_node: tuple[int, str, int | None] | None = None  # node_rank, host, status
    signal: int | None = None
    exits: list[RankExit] = field(default_factory=list)
    hang: hang.Hang | None = None  # --hang-timeout ended the job (exit hang.HANG_EXIT)


def supervise(plan: LaunchPlan, handles: Sequence[AgentHandle]) -> Outcome:
    inbox: queue.Queue[tuple[int, wire.Event | None]] = queue.Queue()  # events only: a few per rank
    caught: list[int] = []
    sys.stdout.flush()
    out = Sink(1)

    def pump(index: int, handle: AgentHandle) -> None:
        try:
            for line in handle.lines():
                event = wire.decode(line)
                if event is None:
                    out.put_wait(index, line.encode("utf-8", "replace"))
                else:
                    inbox.put((index, event))
        finally:
            inbox.put((index, None))

    threads = [threading.Thread(target=pump, args=(i, h), daemon=True) for i, h in enumerate(handles)]
    previous = {
        s: signal.signal(s, lambda signum, _f: caught.append(signum)) for s in (*_SIGNALS, *_FORWARDED, _STACKS)
    }
    try:
        out.start()
        for t in threads:
            t.start()
        return _loop(plan, handles, inbox, caught, out)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _log_teardown(outcome: Outcome) -> None:
    from dslaunch.logs import get_logger

    cause = outcome.root_cause
    reason = (
        "hang"
        if outcome.hang
        else f"rank {cause.rank} on {cause.host} failed"
        if cause
        else f"signal {signal.Signals(outcome.signal).name}"
        if outcome.signal
        else f"lost node {outcome.lost_node[0]}"
        if outcome.lost_node
        else "a node agent failed"
    )
    get_logger("launcher").info("teardown", reason=reason)


def _loop(
    plan: LaunchPlan,
    handles: Sequence[AgentHandle],
    inbox: queue.Queue[tuple[int, wire.Event | None]],
    caught: list[int],
    out: Sink,
) -> Outcome:
    outcome = Outcome(code=0)
    done: dict[int, int] = {}
    finished: set[int] = set()  # node ranks
    watch = hang.HangWatch(plan, handles)
    open_streams = len(handles)
    stopping_since: float | None = None
    killed = False

    def stop_all() -> None:
        nonlocal stopping_since
        if stopping_since is None:
            stopping_since = time.monotonic()
            _log_teardown(outcome)
            for h in handles:
                h.stop()

    while open_streams:
        while caught:
            signum = caught.pop(0)
            if signum in _FORWARDED:
                for h in handles:
                    h.signal(signum)
                continue
            if signum == _STACKS:
                if stopping_since is None:
                    _ask_stacks(plan, handles)
                continue
            if outcome.signal is not None and not killed:
                killed = True  # a second Ctrl-C: stop waiting for the grace period
                for h in handles:
                    h.kill()
            outcome.signal = outcome.signal or signum
            stop_all()
        if stopping_since is not None and not killed:
            if time.monotonic() - stopping_since > plan.shutdown_timeout + 3.0:
                killed = True
                for h in handles:
                    h.kill()
        if stopping_since is None and watch.hung(finished):
            watch.declare()
            write_within(2, (hang.declared_line(plan) + "\n").encode(), STALL)
            if hang.stacks_line(plan) is None:
                _ask_stacks(plan, handles)
        if stopping_since is None and watch.asked_at is not None and watch.settled(finished):
            outcome.hang = watch.result(finished)
            stop_all()
        if stopping_since is not None and out.stalled(STALL):
            out.abandon()  # let the reader threads drain the agents' streams
        try:
            index, event = inbox.get(timeout=0.05)
        except queue.Empty:
            continue
        handle = handles[index]
        if event is None:
            open_streams -= 1
            finished.add(handle.node_rank)
            if index not in done:
                status = handle.wait(1.0)
                if outcome.root_cause is None and outcome.lost_node is None and outcome.signal is None:
                    outcome.lost_node = (handle.node_rank, handle.host, status)
                stop_all()
            continue
        if isinstance(event, RankExit):
            result = event
            outcome.exits.append(result)
            if result.failed and not result.by_agent:
                if outcome.root_cause is None or result.ts < outcome.root_cause.ts:
                    outcome.root_cause = result
                stop_all()
        elif isinstance(event, (wire.Idle, wire.Stacks)):
            watch.on_event(event)
        elif isinstance(event, wire.Done):
            finished.add(event.node_rank)
            done[index] = event.code
            if done[index] != 0:
                stop_all()

    for h in handles:
        if h.wait(plan.shutdown_timeout + 3.0) is None:
            h.kill()
            h.wait(5.0)
    outcome.code = _final_code(outcome, done)
    out.wait_idle(STALL if stopping_since is not None or outcome.code else None)
    return outcome


def _ask_stacks(plan: LaunchPlan, handles: Sequence[AgentHandle]) -> None:
    refused = hang.stacks_line(plan)
    if refused is not None:
        write_within(2, (refused + "\n").encode(), STALL)
        return
    for h in handles:
        h.signal(_STACKS)


def _final_code(outcome: Outcome, done: dict[int, int]) -> int:
    if outcome.signal is not None:
        return 128 + outcome.signal
    if outcome.hang is not None:
        return hang.HANG_EXIT
    if outcome.root_cause is not None:
        return outcome.root_cause.code
    if outcome.lost_node is not None:
        status = outcome.lost_node[2]
        if not status:
            return 1
        return 128 - status if status < 0 else status  # Popen's -N for "killed by signal N" is 128+N
    return next((code for code in done.values() if code), 0)


def report(outcome: Outcome, plan: LaunchPlan) -> JobResult:
    """Print the failure summary (if any) to stderr after the ranks' output; return the attempt's result.

    A stderr nobody reads (``2>&1 | sleep 30``) gets it for ``STALL`` seconds at most; the
    launcher's log file (``--log-dir``) always gets it.
    """
    summary = format_summary(outcome, plan)
    if summary:
        from dslaunch.logs import file_record

        file_record("launcher", "job failed", summary=summary, code=outcome.code)
        write_within(2, (summary + "\n").encode(), STALL)
    return JobResult(outcome.code, cause_line(outcome), retry=outcome.signal is None)


def supervise_and_report(plan: LaunchPlan, handles: Sequence[AgentHandle]) -> JobResult:
    return report(supervise(plan, handles), plan)


def _how(cause: RankExit) -> str:
    return f"was killed by {cause.signal}" if cause.signal else f"exited with code {cause.code}"


def cause_line(outcome: Outcome) -> str:
    """What ended the attempt, in a few words ("" on success)."""
    if outcome.code == 0:
        return ""
    if outcome.signal is not None:
        return f"dslaunch received {signal.Signals(outcome.signal).name}"
    if outcome.hang is not None:
        culprits = [str(rank) for rank, _host in outcome.hang.culprits[:8]]
        named = f"rank{'s' if len(culprits) > 1 else ''} {', '.join(culprits)}" if culprits else "unknown"
        return f"hang: no progress for {outcome.hang.timeout:g} s (least progress: {named})"
    cause = outcome.root_cause
    if cause is not None:
        how = _how(cause)
        return f"rank {cause.rank} on {cause.host} {how}"
    if outcome.lost_node is not None:
        return f"node {outcome.lost_node[0]} ({outcome.lost_node[1]}) disappeared"
    return f"a node agent failed with exit code {outcome.code}"


def format_summary(outcome: Outcome, plan: LaunchPlan) -> str | None:
    """A short, human summary of a failed run for stderr; None on success."""
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
