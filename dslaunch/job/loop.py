"""Launcher-side supervision shared by every runner: the I/O around ``job/state.py``.

Each runner wraps its transport (a local subprocess, an ssh channel, ...) in an ``AgentHandle`` (``job/protocols.py``).
:func:`supervise` relays the agents' output, feeds their events, stream ends and dslaunch's signals to a
:class:`JobState` and carries out what it decides, until every stream has closed.

One thread per handle reads its lines: events go to the main loop, output into that handle's lane
(``output/lanes.py``) and on into a bounded sink on our stdout (local agents write output themselves and send only
events). A full sink holds up the lane, never the reader thread: an event never waits behind output.
"""

from __future__ import annotations

import functools
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.errors import assert_never
from dslaunch.job.protocols import AgentHandle
from dslaunch.job.result import JobResult
from dslaunch.job.state import (
    KILL_GRACE,
    Action,
    Finish,
    JobState,
    KillAll,
    Outcome,
    RequestStacks,
    RequestStop,
    Say,
    Signal,
    StopAll,
    StopAt,
)
from dslaunch.job.summary import blamed_hosts, cause_line, failures_of, format_summary, stepped
from dslaunch.observe import session
from dslaunch.output import lanes, terminal
from dslaunch.output.remote_console import RemoteConsole
from dslaunch.output.sink import STALL, Sink, write_within
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer

POLL = 0.05  # how often the loop looks at signals and the time while no event comes

Inbox = queue.Queue[tuple[int, wire.Event | None]]  # events only (a few per rank); None: that stream ended
Saying = Callable[[bytes], bool]  # a line of the launcher's own to stderr (output/terminal.say)


def supervise(
    plan: LaunchPlan,
    handles: Sequence[AgentHandle],
    err: lanes.ErrLane | None,
    observer: Observer | None,
    *,
    decides_stop_step: bool = True,
    caught: list[int] | None = None,
) -> Outcome:
    """One attempt over ``handles``, to its outcome; ``err``: a remote runner's stderr lane (flushed at the end);
    ``observer``: the job's, with its status line (None: nothing is watched); ``decides_stop_step``: False on a pod
    that is not the coordinator (which answers the stop steps of every pod); ``caught``: the stop signals the
    caller held while it started the attempt (``job/attempts.stop_signals_caught``), acted on first."""
    inbox: Inbox = queue.Queue()
    caught = caught if caught is not None else []
    sys.stdout.flush()
    out = Sink(1, budget=lanes.SINK_BUDGET)
    held = [lanes.OutputLane(out, i) for i in range(len(handles))]
    console = RemoteConsole(plan, out, err) if plan.collapse_output else None
    threads = [
        threading.Thread(target=_pump, args=(i, h, inbox, held[i], console), daemon=True) for i, h in enumerate(handles)
    ]
    previous = {
        s: signal.signal(s, lambda signum, _f: caught.append(signum))
        for s in (*wire.STOP_SIGNALS, *wire.FORWARDED_SIGNALS, wire.STACKS_SIGNAL)
    }
    status_line = session.status_line_of(observer)
    owner = terminal.own(out, err, status_line)  # every line to our terminal through ``out``, the line below
    try:
        out.start()
        for t in threads:
            t.start()
        stop_nodes = frozenset(n for h in handles for n in h.node_ranks)
        nodes = [(h.node_rank, h.host) for h in handles]
        state = JobState(
            plan, nodes, decides_stop_step=decides_stop_step, stop_nodes=stop_nodes, started=time.monotonic()
        )
        watching = session.for_attempt(observer, plan)  # the breakdown, stragglers, metrics (docs/observability.md)
        say: Saying = functools.partial(terminal.say, status_line)
        outcome = _drive(state, handles, inbox, caught, out=out, observer=watching, say=say, console=console)
        if console is not None:
            held.append(console.close())
        lanes.flush(held, out, STALL if outcome.code else None)
        if owner is not None:  # before the summary, which goes to stderr itself
            owner.release(STALL)
            owner = None
        if err is not None:
            err.flush(STALL if outcome.code else None)
        _say_dropped(held, handles)
        return outcome
    finally:
        if owner is not None:
            owner.release(STALL)
        if console is not None:
            console.detach()
        out.close()  # its writer ends once everything is out: an attempt's sink costs no thread for good
        for s, h in previous.items():
            signal.signal(s, h)


def _pump(index: int, handle: AgentHandle, inbox: Inbox, lane: lanes.OutputLane, console: RemoteConsole | None) -> None:
    try:
        for line in handle.lines():
            if isinstance(line, str):
                event = wire.decode(line)
                if event is None:
                    if console is None:
                        lane.put(line)
                    else:
                        console.put(lane, line)
                    continue
            else:  # decoded and checked by its handle
                event = line
            if console is not None and isinstance(event, wire.RankExit) and event.failed and not event.by_agent:
                console.flush_out(lane)  # not for each rank a teardown stops: 131,072 at 16,384 pods
            inbox.put((index, event))
    finally:
        lane.close()
        inbox.put((index, None))


def _say_dropped(held: Sequence[lanes.OutputLane], handles: Sequence[AgentHandle]) -> None:
    for lane, h in zip(held, handles):
        if lane.dropped:
            text = f"dslaunch: {lane.dropped} bytes of output from {h.host} were dropped: our stdout was not read"
            write_within(2, (text + "\n").encode(), STALL)


def _drive(
    state: JobState,
    handles: Sequence[AgentHandle],
    inbox: Inbox,
    caught: list[int],
    *,
    out: Sink,
    observer: Observer | session.Unobserved,
    say: Saying,
    console: RemoteConsole | None,
) -> Outcome:
    next_tick = 0.0
    while True:
        while caught:
            _execute(state.on_signal(caught.pop(0), time.monotonic()), handles, say, console)
        now = time.monotonic()
        outcome = _execute(state.tick(now), handles, say, console)
        if outcome is not None:  # every stream has closed
            break
        if now >= next_tick:  # the console's windows and the observer, every POLL (not at each of a storm's events)
            next_tick = now + POLL
            if console is not None:
                console.tick(now)
            observer.tick(now)
        if state.stopping and out.stalled(STALL):
            out.abandon()  # let the reader threads drain the agents' streams
        try:
            index, event = inbox.get(timeout=POLL)
        except queue.Empty:
            continue
        if event is None:
            status = handles[index].wait(1.0) if state.wants_status(index) else None
            _execute(state.on_stream_end(index, status, time.monotonic()), handles, say, console)
        else:
            observer.on_event(event, time.monotonic())
            _execute(state.on_event(index, event, time.monotonic()), handles, say, console)
    for h in handles:
        if h.wait(state.plan.shutdown_timeout + KILL_GRACE) is None:
            h.kill()
            h.wait(5.0)
    return outcome


def _execute(
    actions: Sequence[Action], handles: Sequence[AgentHandle], say: Saying, console: RemoteConsole | None = None
) -> Outcome | None:
    """Carry out the state's actions, in order; the job's outcome once one says the job is done."""
    outcome = None
    for action in actions:
        match action:
            case StopAll() | RequestStop() | StopAt():
                _stop(action, handles)
            case KillAll():
                for h in handles:
                    h.kill()
            case Signal(signum=signum):
                _signal_all(handles, signum)
            case RequestStacks():
                if console is not None:
                    console.pause_for_stacks(time.monotonic())
                _signal_all(handles, wire.STACKS_SIGNAL)
            case Say(text=text):
                say((text + "\n").encode())
            case Finish(outcome=finished):
                outcome = finished
            case _:
                assert_never(action)
    return outcome


def _stop(action: StopAll | RequestStop | StopAt, handles: Sequence[AgentHandle]) -> None:
    if isinstance(action, StopAt):
        for h in handles:
            h.stop_at(action.step)
        return
    from dslaunch.logs import get_logger

    if isinstance(action, StopAll):
        get_logger("launcher").info("teardown", reason=action.reason)
        for h in handles:
            h.stop()
        return
    name = signal.Signals(action.signum).name
    get_logger("launcher").info("stop requested", signal=name, end_grace=action.now)
    for h in handles:
        h.request_stop(action.signum, now=action.now)


def _signal_all(handles: Sequence[AgentHandle], signum: int) -> None:
    for h in handles:
        h.signal(signum)


def report(outcome: Outcome, plan: LaunchPlan) -> JobResult:
    """Print the failure summary (if any) to stderr after the ranks' output; return the attempt's result.

    A stderr nobody reads (``2>&1 | sleep 30``) gets it for ``STALL`` seconds at most; the
    launcher's log file (``--log-dir``) always gets it.
    """
    summary = format_summary(outcome, plan)
    if summary:
        from dslaunch.logs import file_record

        file_record(
            "launcher", "job stopped" if outcome.stopped_by else "job failed", summary=summary, code=outcome.code
        )
        write_within(2, (summary + "\n").encode(), STALL)
    requested = outcome.stopped_by is not None
    return JobResult(
        outcome.code,
        cause_line(outcome),
        retry=outcome.signal is None and not requested,
        blamed=blamed_hosts(outcome),
        failures=failures_of(outcome),
        stepped=stepped(outcome),
        failed_after=outcome.failed_after,
        stopped_by=outcome.stopped_by,
    )


def supervise_and_report(
    plan: LaunchPlan, handles: Sequence[AgentHandle], err: lanes.ErrLane | None, observer: Observer | None
) -> JobResult:
    return report(supervise(plan, handles, err, observer), plan)
