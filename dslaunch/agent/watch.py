"""The node agent's side of stacks on demand and hang detection (docs/hangs.md).

Each rank gets a progress file (``dslaunch.bootstrap.progress``). A rank makes progress when it writes output
(the agent sees every chunk) or bumps its beat counter (``dslaunch.heartbeat()``, ``engine.timers.step()``),
which the agent polls. With ``--hang-timeout``, the agent tells the launcher (``wire.Idle``) when none of its
live ranks has made progress for that long, and again when one does; the launcher decides globally.

A stacks request (SIGQUIT to the agent, or ``signal SIGQUIT`` on its control channel) sends SIGQUIT to each
live Python rank whose bootstrap has installed the stack printer (to the rank's own pid: its children have
no printer), names the ranks that cannot print one, and, a moment later, reports each rank's state in a
``wire.Stacks`` event: whether its printed stack waits in ``torch.distributed``.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass

from dslaunch import wire
from dslaunch.bootstrap import progress
from dslaunch.observe.window_relay import WindowRelay, window_steps
from dslaunch.plan import LaunchPlan

STACKS_WINDOW = 1.0  # after a stacks request: how long the stacks' output is read before the report
_DEDUP = 1.0  # a second request this soon is the same one (Ctrl-\ reaches the launcher and a local agent)
_CAPTURE = 1 << 20  # of a rank's stderr after a stacks request, read for the report
_IN_COLLECTIVE = (b"torch/distributed/", b"torch\\distributed\\")
_TRACE_BUFFER = "2000"  # entries of torch's flight recorder, as torch's own docs suggest
_TRACE_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch's name, and its older one
STARTUP = 60.0  # until its first progress (imports, rendezvous), a rank has at least this long


@dataclass
class _RankProgress:
    """One rank as the progress watch follows it: its progress file, its progress, its stack request."""

    rank: int
    fd: int
    no_python: bool
    pid: int = 0
    beats: int = 0
    count: int = 0  # beats + output chunks: how much progress it made
    last: float = 0.0  # monotonic time of its last progress (its start until it makes some)
    progressed: bool = False
    quiet_until: float = 0.0  # its stack is being printed: that output is no progress
    capture: bytearray | None = None
    trace: str | None = None  # where its NCCL flight recorder dump goes (--hang-timeout)
    state: str = "running"
    alive: bool = True


class ProgressWatch:
    def __init__(self, plan: LaunchPlan, node_rank: int, run_dir: str) -> None:
        self.plan = plan
        self.node_rank = node_rank
        self.host = plan.node(node_rank).host
        self.run_dir = run_dir
        self.timeout = plan.hang_timeout
        self.poll = min(1.0, self.timeout / 4) if self.timeout else None
        self.ranks: dict[int, _RankProgress] = {}
        self.idle: tuple[bool, bool] = (False, True)  # reported: (idle, any rank left)
        self.next_poll = 0.0
        self.report_at: float | None = None
        self.last_request = float("-inf")
        self.windows = WindowRelay(node_rank) if window_steps(plan) else None  # docs/observability.md

    def add(self, rank: int, env: dict[str, str]) -> None:
        """Create rank ``rank``'s progress file and put its variables in the rank's ``env``."""
        path = os.path.join(self.run_dir, f"rank{rank}.progress")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            os.ftruncate(fd, progress.SIZE)
        except OSError:
            return  # no stacks or heartbeats for this rank; its output still counts
        self.ranks[rank] = _RankProgress(rank, fd, self.plan.program.no_python, last=time.monotonic())
        env[progress.ENV] = path
        if self.windows is not None:
            self.windows.add(rank, env, self.run_dir)
        if self.timeout is not None:
            where = self.plan.log_dir or tempfile.gettempdir()
            env[progress.TRACE_ENV] = self.ranks[rank].trace = os.path.join(
                where, f"dslaunch-{self.plan.run_id}.nccl-trace.rank{rank}"
            )
            if not any(name in env for name in _TRACE_VARS):
                env[_TRACE_VARS[0]] = _TRACE_BUFFER

    def started(self, rank: int, pid: int) -> None:
        st = self.ranks.get(rank)
        if st is not None:
            st.pid = pid
            st.last = time.monotonic()

    def beats(self, rank: int) -> int:
        """How many progress beats ``rank`` made in this attempt (0: none, or it has no progress file)."""
        st = self.ranks.get(rank)
        return 0 if st is None else progress.read_word(st.fd, progress.BEATS)

    def ended(self, rank: int) -> None:
        st = self.ranks.get(rank)
        if st is not None:
            st.alive = False

    def output(self, rank: int, chunk: bytes, is_err: bool) -> None:
        st = self.ranks.get(rank)
        if st is None:
            return
        now = time.monotonic()
        if st.capture is not None and is_err and len(st.capture) < _CAPTURE:
            st.capture += chunk[: _CAPTURE - len(st.capture)]
        if now >= st.quiet_until:
            st.count += 1
            st.last = now
            st.progressed = True

    def request_stacks(self) -> list[tuple[int, str]]:
        """Ask every live rank for its stack; the lines to print for the ranks that cannot, as (rank, text)."""
        now = time.monotonic()
        if now - self.last_request < _DEDUP:
            return []
        self.last_request = now
        self.report_at = now + STACKS_WINDOW
        notes = []
        for st in self.ranks.values():
            st.capture = None
            if not st.alive:
                st.state = "exited"
            elif st.no_python:
                st.state = "no-python"
                notes.append((st.rank, "dslaunch: --no-python rank: it cannot print a Python stack"))
            elif progress.read_word(st.fd, progress.STARTED) != 1 or not st.pid:
                st.state = "not started"
                notes.append((st.rank, "dslaunch: no stack: the rank's Python has not started yet"))
            else:
                st.state = "running"
                st.capture = bytearray()
                st.quiet_until = now + STACKS_WINDOW
                progress.write_word(st.fd, progress.REQUEST, progress.read_word(st.fd, progress.REQUEST) + 1)
                try:
                    os.kill(st.pid, signal.SIGQUIT)
                except (ProcessLookupError, PermissionError):
                    st.state = "exited"
        return notes

    def due(self, now: float) -> float | None:
        """Seconds until ``tick`` has work, None for never."""
        waits = [t - now for t in (self.report_at, self.next_poll if self.poll else None) if t is not None]
        if self.windows is not None and (due := self.windows.due(now)) is not None:
            waits.append(due)
        return max(0.0, min(waits)) if waits else None

    def tick(self, now: float) -> list[wire.Event]:
        """Poll the beat counters; the events to send (an idle change, a stacks report)."""
        events: list[wire.Event] = [] if self.windows is None else self.windows.tick(now)
        if self.report_at is not None and now >= self.report_at:
            self.report_at = None
            events.append(self._report(now))
        if self.poll is None or self.timeout is None or now < self.next_poll:
            return events
        self.next_poll = now + self.poll
        live = [st for st in self.ranks.values() if st.alive]
        for st in live:
            beats = progress.read_word(st.fd, progress.BEATS)
            if beats != st.beats:
                st.count += max(1, beats - st.beats)
                st.beats = beats
                st.last = now
                st.progressed = True
        timeout = self.timeout
        idle = all(now - st.last >= (timeout if st.progressed else max(timeout, STARTUP)) for st in live)
        if (idle, bool(live)) != self.idle:
            self.idle = (idle, bool(live))
            events.append(wire.Idle(node_rank=self.node_rank, idle=idle, live=len(live)))
        return events

    def _report(self, now: float) -> wire.Stacks:
        ranks, traces = [], []
        for st in sorted(self.ranks.values(), key=lambda s: s.rank):
            if st.trace and st.alive and progress.read_word(st.fd, progress.NCCL) == 1:
                traces.append(st.trace)
            state = st.state
            if st.capture is not None:
                if any(mark in st.capture for mark in _IN_COLLECTIVE):
                    state = "collective"
                st.capture = None
            ranks.append((st.rank, state, st.count, round(now - st.last, 3)))
        return wire.Stacks(node_rank=self.node_rank, host=self.host, ranks=tuple(ranks), traces=tuple(traces))

    def close(self) -> None:
        if self.windows is not None:
            self.windows.close()
        for st in self.ranks.values():
            try:
                os.close(st.fd)
            except OSError:
                pass
