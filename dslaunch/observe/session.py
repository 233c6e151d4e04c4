"""The launcher's side of seeing a running job: the one seam where windows become prints, warnings, a log file,
metrics and posts to Kubeflow Trainer's progress API.

The CLI starts one :class:`Observer` for the job (:func:`start`) and passes it down: ``job/attempts.py`` tells it
how each attempt ended, and hands it to the runner, which passes it to ``job/loop.supervise``, which hands it every
agent event of an attempt and ticks it. The observer posts the job's status line (``--status-line``), which the
runner hands on to whoever draws it. It groups the ranks' windows (each node's ``wire.NodeWindows``; a lone rank's
``wire.TimerWindow`` too) by window number; a window is complete once every rank of the attempt that is still
running sent it, or two later ones came from some rank (a rank whose window was not read is left out). Each
complete window feeds the straggler watch and the breakdown's running period, read as columns
(``observe/node_windows.py``): a node's ranks at a time, not each rank in Python, so a coordinator of thousands of
pods keeps up (issue 54); the period prints every ``--breakdown-every`` steps or seconds.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.observe import breakdown, live
from dslaunch.observe.figures import JobFigures
from dslaunch.observe.node_windows import Period, one_rank, subset, window_columns
from dslaunch.observe.settings import ObserveSettings
from dslaunch.observe.stragglers import StragglerWatch
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.observe.metrics import Exporter
    from dslaunch.observe.trainer_status import Poster
    from dslaunch.output.status_line import StatusLine

_STALE = 2  # a window still incomplete once some rank sent this many later ones is taken as it is
_METRICS_FILE_EVERY = 1.0


@dataclass
class _Gathering:
    """One window's events so far: which ranks sent it, and how many of those are still running."""

    parts: list[wire.NodeWindows] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    live: int = 0


class Observer:
    def __init__(self, settings: ObserveSettings, plan: LaunchPlan, status_line: StatusLine | None = None) -> None:
        self.settings = settings
        self.figures = JobFigures(ranks=plan.world_size, nodes=len(plan.nodes))
        self.metrics: Exporter | None = None
        self.trainer: Poster | None = None  # Kubeflow Trainer's progress API, posted by the coordinator only
        self.job_wide = not _member_pod(plan)
        self.next_file = 0.0
        self.next_live = 0.0  # --log-dir's status.json, for --report on a running job (observe/live.py)
        self.status_line = status_line  # --status-line: posted here, drawn by the terminal's writer
        self._attempt(plan)

    def _attempt(self, plan: LaunchPlan) -> None:
        self.where = {r: where for n in plan.nodes for where in [breakdown.Where(n.node_rank, n.host)] for r in n.ranks}
        self.pending: dict[int, _Gathering] = {}
        self.done_index = 0
        self.ended: set[int] = set()
        self.live = len(self.where)  # the attempt's ranks that have not ended
        self.period = Period()
        self.period_first = 0
        self.printed_at = time.monotonic()
        self.printed_step = 0
        s = self.settings
        self.watch = StragglerWatch(s.straggler_factor, 1, s.window, self.where) if s.straggler_factor else None
        f = self.figures
        f.ranks, f.nodes, f.ranks_alive, f.nodes_done = plan.world_size, len(plan.nodes), 0, 0

    def begin(self, plan: LaunchPlan) -> None:
        """An attempt of ``plan`` starts: its steps count from its own first (a restart resumes at the user's
        checkpoint, which dslaunch does not know)."""
        self._attempt(plan)
        self.job_wide = not _member_pod(plan)  # an elastic pod learns its node rank at each attempt
        f = self.figures
        f.attempt, f.state, f.step, f.step_rate, f.regions = plan.restarts.count, "running", 0, 0.0, ()
        f.attempt_began(time.time(), first=plan.restarts.count == 0)
        self.next_live = 0.0  # the new attempt's state at the next tick

    # ---- events ---------------------------------------------------------------------------------------------
    def on_event(self, event: wire.Event, now: float) -> None:
        f = self.figures
        if isinstance(event, wire.Spawned):
            f.ranks_alive += 1
        elif isinstance(event, wire.RankExit):
            f.ranks_alive = max(0, f.ranks_alive - 1)
            self._ended(event.rank)
        elif isinstance(event, wire.Done):
            f.nodes_done += 1
        elif isinstance(event, wire.NodeLost):
            f.nodes_lost += 1
        elif isinstance(event, wire.TimerWindow):
            self._windows(one_rank(event), now)
        elif isinstance(event, wire.NodeWindows):
            self._windows(event, now)

    def _ended(self, rank: int) -> None:
        if rank in self.ended:
            return
        self.ended.add(rank)
        if rank in self.where:
            self.live -= 1
            for gathering in self.pending.values():
                gathering.live -= rank in gathering.ranks

    def _windows(self, event: wire.NodeWindows, now: float) -> None:
        """A node's ranks' windows of one number: kept for that window (ranks of other attempts or already heard
        left out), which completes once every running rank sent it."""
        if event.index <= self.done_index:
            return
        gathering = self.pending.get(event.index) or self.pending.setdefault(event.index, _Gathering())
        ranks = set(event.ranks)
        if not (gathering.ranks.isdisjoint(ranks) and self.where.keys() >= ranks):
            keep = [i for i, r in enumerate(event.ranks) if r in self.where and r not in gathering.ranks]
            if not keep:
                return
            event = subset(event, keep)
            ranks = set(event.ranks)
        gathering.parts.append(event)
        gathering.ranks |= ranks
        gathering.live += len(ranks) - len(ranks & self.ended) if self.ended else len(ranks)
        if event.first_step_at:
            self.figures.first_step(event.first_step_at)
        self._complete(now)

    def _complete(self, now: float) -> None:
        newest = max(self.pending, default=0)
        while self.pending:
            index = min(self.pending)
            if self.pending[index].live < self.live and newest - index < _STALE:
                return
            parts = self.pending.pop(index).parts
            self.done_index = index
            self._window(parts, now)

    def _window(self, parts: list[wire.NodeWindows], now: float) -> None:
        f = self.figures
        window = window_columns(parts)
        for part in parts:
            self.period.add(part)
        last = window.last
        self.period_first = self.period_first or window.first
        f.stepped(breakdown.median(window.walls))
        f.step, f.step_rate = max(f.step, last), breakdown.median(window.rates)
        f.regions = breakdown.summarize_columns(window.regions, self.where)
        if self.watch is not None:
            medians = {s.region: s.median for s in f.regions}
            for line in self.watch.feed_columns(window.regions, window.count, medians):
                self._warn(line)
            f.stragglers = sum(1 for t in self.watch.tracks.values() if t.flagged)
        every = self.settings.every_steps
        if every and last // every > self.printed_step // every:  # at steps N, 2N, ... (or the first past them)
            self._print_period(last, now)

    # ---- the breakdown's period ------------------------------------------------------------------------------
    def _print_period(self, last: int, now: float) -> None:
        if not self.period:
            return
        stats = breakdown.summarize_columns(self.period.columns(), self.where)
        first = self.period_first
        self.period, self.period_first, self.printed_at, self.printed_step = Period(), 0, now, last
        if self.settings.breakdown:
            self._say(breakdown.format_table(stats, first, last, self.figures.ranks))
            if self.settings.log_dir:
                _append(os.path.join(self.settings.log_dir, "breakdown.jsonl"), breakdown.as_record(stats, first, last))

    def tick(self, now: float) -> None:
        """Time-driven work: a breakdown every N seconds, the metrics file, the progress API's figures (posted from
        the poster's own thread: nothing here waits for the endpoint)."""
        every = self.settings.every_seconds
        if every and self.period and now - self.printed_at >= every:
            self._print_period(self.figures.step, now)
        if self.metrics is not None and now >= self.next_file:
            self.next_file = now + _METRICS_FILE_EVERY
            self.publish()
        if self.trainer is not None and self.job_wide:
            self.trainer.offer(self.figures)
        if (self.settings.log_dir or self.status_line is not None) and now >= self.next_live:
            self.next_live = now + live.EVERY
            self.write_live()

    def write_live(self) -> None:
        """status.json (--log-dir) and the status line (--status-line): the same state."""
        if not self.settings.log_dir and self.status_line is None:
            return
        wall = time.time()
        state = live.snapshot(self.figures, wall, os.getpid())
        if self.settings.log_dir:
            live.write(self.settings.log_dir, state)
        if self.status_line is not None:
            self.status_line.post(live.status_line(state, wall))

    # ---- the job ---------------------------------------------------------------------------------------------
    def attempt_ended(self, code: int, cause: str, restarting: bool) -> None:
        """An attempt is over: its last windows and period print, the restart counts by ``cause``."""
        now = time.monotonic()
        while self.pending:
            index = min(self.pending)
            self.done_index = index
            self._window(self.pending.pop(index).parts, now)
        self._print_period(self.figures.step, now)
        f = self.figures
        f.attempt_over(time.time(), restarting)
        if restarting:
            f.restarts[cause] = f.restarts.get(cause, 0) + 1
            f.state = "restarting"
        else:
            f.state = "succeeded" if code == 0 else "failed"
        self.publish()
        self.write_live()

    def publish(self) -> None:
        if self.metrics is not None:
            self.metrics.write_file()

    def close(self) -> None:
        """The job is over: the metrics' last state, and the progress API's (if this launcher ever posted)."""
        if self.metrics is not None:
            self.publish()
            self.metrics.close()
        if self.trainer is not None:
            self.trainer.close()

    # ---- the launcher's own lines -----------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        from dslaunch.output import terminal

        terminal.say(self.status_line, (text + "\n").encode())

    def _warn(self, text: str) -> None:
        from dslaunch.logs import get_logger

        if self.status_line is not None:
            self.status_line.clear(2)
        get_logger("launcher").warning(text)


def _member_pod(plan: LaunchPlan) -> bool:
    """A pod (one launcher a node) that is not node 0: the coordinator, node 0, holds the job-wide figures."""
    return plan.transport.node0_holds_job_figures and bool(plan.manual_node)


def _append(path: str, data: dict[str, object]) -> None:
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(data, separators=(",", ":")) + "\n")
    except OSError:
        pass


# ---- the job's observer ----------------------------------------------------------------------------------------
def start(settings: ObserveSettings, plan: LaunchPlan) -> Observer | None:
    """The job's observer (None when nothing is to be seen), with its status line where one is asked for; with
    metrics asked for, their exporter starts; where Kubeflow Trainer's progress API is set and this launcher may
    hold the job's figures, its poster (which posts from the first tick of an attempt where this launcher does).
    ``Observer.close`` ends it."""
    if not settings.collect:
        return None
    status_line = None
    if settings.status_line:  # before any agent is forked: they share its page
        from dslaunch.output.status_line import StatusLine

        status_line = StatusLine()
    observer = Observer(settings, plan, status_line)
    if settings.metrics:
        from dslaunch.observe import metrics

        observer.metrics = metrics.Exporter(settings, observer.figures)
    if settings.trainer_status and observer.job_wide:
        from dslaunch.observe import trainer_status

        endpoint = trainer_status.from_env(os.environ)
        if endpoint is not None:
            every, total = settings.status_every, settings.total_steps
            observer.trainer = trainer_status.Poster(endpoint, every=every, total_steps=total)
    return observer


class Unobserved:
    """An attempt nobody watches: the loop calls it all the same."""

    def on_event(self, event: wire.Event, now: float) -> None:
        pass

    def tick(self, now: float) -> None:
        pass


def status_line_of(observer: Observer | None) -> StatusLine | None:
    """The job's status line (--status-line), for whoever draws it: None where there is none."""
    return None if observer is None else observer.status_line


def for_attempt(observer: Observer | None, plan: LaunchPlan) -> Observer | Unobserved:
    """The job's observer, told that an attempt of ``plan`` starts; a no-op one when there is none."""
    if observer is None:
        return Unobserved()
    observer.begin(plan)
    return observer
