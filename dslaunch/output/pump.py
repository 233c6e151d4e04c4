"""One node agent's rank output: read from the ranks' pipes, relayed into one sink per output fd.

Each rank's stdout and stderr go through ``relay`` (prefixes, long lines, ``\\r`` bars), a copy to the rank's
log files, and, where this agent writes the console itself, the console collapse (``collapse_agent``), into a
:class:`Sink` that a writer thread drains. The node loop (``agent/node_loop.py``) owns the selector and the
processes: it hands each rank's pipes to :meth:`OutputPump.add`, calls :meth:`OutputPump.read_ready` when a pipe
is ready, and learns of every read through ``on_read``. A rank's pipe is read only while its sink has room, and
a stream showing a ``\\r`` bar that writes little is read at most every ``BAR_PAUSE`` seconds (docs/output.md).
The pump is ``agent.node_state.Pipes`` for the node's decisions: whether a pipe is open, paused, or output queued.
"""

from __future__ import annotations

import fcntl
import os
import selectors
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO

from dslaunch import wire
from dslaunch.output import collapse
from dslaunch.output.collapse_agent import SinkCollapse
from dslaunch.output.relay import READ_SIZE, LineRelay, Piece
from dslaunch.output.sink import STALL, Sink
from dslaunch.output.status_line import StatusLine
from dslaunch.plan import LaunchPlan

BAR_PAUSE = 0.02  # a stream showing a \r bar that writes little is read at most this often
TAIL_READS = 8  # chunks of a failed rank's stderr read at its exit, for the summary
_BAR_PIPE = 256 << 10  # 64 ranks drawing bars stay well inside the default per-user pipe quota (64 MiB)

OnRead = Callable[[int, bytes, bool, float], None]
"""Told of each read from a rank's pipe: (rank, the chunk (empty at the pipe's end), from stderr, monotonic now)."""


def enlarge_pipe(fd: int) -> None:
    """Let a pipe hold ``_BAR_PIPE`` bytes (Linux), so pausing its reader rarely blocks the writer."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _BAR_PIPE)
    except OSError:
        pass  # over the user's pipe-size limits: the pipe keeps its size


def drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def _sole_agent(plan: LaunchPlan) -> bool:
    """Whether this is the only agent that writes its console: one local node, or a pod (one launcher a node, each
    writing its own console)."""
    return len(plan.nodes) == 1 or plan.transport.console_per_node


def same_file(a: int, b: int) -> bool:
    try:
        sa, sb = os.fstat(a), os.fstat(b)
    except OSError:
        return a == b
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


@dataclass(eq=False)
class RankStream:
    """One of a rank's pipes on its way to a sink."""

    fd: int
    pipe: IO[bytes]
    rank: int
    prefix: bytes
    relay: LineRelay
    sink: Sink
    log: IO[bytes] | None
    is_err: bool
    resume_at: float = 0.0  # a bar that writes little is read again only from then
    watched: bool = False
    roomy: bool = False  # its pipe was enlarged for a bar
    collapse: SinkCollapse | None = None  # identical lines of many ranks print once (output/collapse.py)

    def put(self, pieces: list[Piece], bar: bytes | None) -> None:
        if self.collapse is None:
            self.sink.put(self, pieces, bar)
        else:
            self.collapse.put(self, self.rank, self.prefix, pieces, bar, now=time.monotonic())


class OutputPump:
    """The ranks' streams of one node and the sinks they go to (fds ``out`` and ``err``)."""

    def __init__(
        self,
        plan: LaunchPlan,
        node_rank: int,
        sel: selectors.BaseSelector,
        *,
        out: int,
        err: int,
        forked: bool,
        on_read: OnRead,
        status_line: StatusLine | None = None,
    ) -> None:
        """``forked``: events go on a pipe of their own (a forked local agent), not before ``out``'s output;
        ``status_line``: the job's (--status-line), handed down by the launcher that forked this agent."""
        self.host = plan.node(node_rank).host
        self.sel = sel  # the node loop's: a pipe is registered with ("pipe", its RankStream)
        self.on_read = on_read
        self.streams: dict[int, RankStream] = {}  # the open ones, by fd
        self.by_rank: dict[int, list[RankStream]] = {}  # each rank's two, open or closed
        self.prefixes: dict[int, bytes] = {}
        self._wake, wake_w = os.pipe()
        os.set_blocking(self._wake, False)
        os.set_blocking(wake_w, False)
        # Live bars only on a terminal, never on a stream that also carries events.
        self.out_sink = Sink(out, live=forked and os.isatty(out), wake=wake_w)
        self.err_sink = (
            self.out_sink if same_file(out, err) else Sink(err, live=os.isatty(err), wake=wake_w)
        )  # one writer for `2>&1`, so stdout and stderr lines never interleave mid-line
        self.sinks = [self.out_sink] if self.err_sink is self.out_sink else [self.out_sink, self.err_sink]
        if status_line is not None and self.out_sink.live and len(self.sinks) == 1 and _sole_agent(plan):
            self.out_sink.status_line = (
                status_line  # one writer for the terminal: several agents would draw over each other
            )
        self.collapses = self._collapses(plan, forked)
        # where the launcher collapses this agent's stderr, it is told to print what it holds when a rank fails
        self._flush_mark = plan.collapse_output and self.err_sink.fd not in self.collapses

    def _collapses(self, plan: LaunchPlan, forked: bool) -> dict[int, SinkCollapse]:
        """By sink fd: where this agent writes ranks' lines to the console itself, it collapses them."""
        if not plan.collapse_output:
            return {}
        found: dict[int, SinkCollapse] = {}
        for sink, wanted in zip((self.out_sink, self.err_sink), collapse.agent_collapses(forked)):
            if wanted and sink.fd not in found:
                found[sink.fd] = SinkCollapse(sink, self.host, with_host=len(plan.nodes) > 1)
        return found

    # ---- node_state.Pipes ---------------------------------------------------
    @property
    def open(self) -> bool:
        return bool(self.streams)

    @property
    def reading_all(self) -> bool:
        return not any(stream.sink.full for stream in self.streams.values())

    @property
    def drained(self) -> bool:
        return all(sink.idle for sink in self.sinks)

    # ---- the streams --------------------------------------------------------
    def add(
        self, rank: int, prefix: bytes, stdout: IO[bytes], stderr: IO[bytes], logs: tuple[IO[bytes] | None, ...]
    ) -> None:
        """A started rank's two pipes, and the files its stdout and stderr are copied to (``logs``; None: none)."""
        self.prefixes[rank] = prefix
        streams = self.by_rank[rank] = []
        for pipe, sink, log in ((stdout, self.out_sink, logs[0]), (stderr, self.err_sink, logs[1])):
            fd = pipe.fileno()
            os.set_blocking(fd, False)
            relay = LineRelay(prefix, live=sink.live)
            stream = RankStream(fd, pipe, rank, prefix, relay, sink, log, is_err=pipe is stderr)
            stream.collapse = self.collapses.get(sink.fd)
            self.streams[fd] = stream
            streams.append(stream)

    def start(self) -> None:
        """The sinks' writer threads (only now: the ranks were forked from a single-threaded process)."""
        self.sel.register(self._wake, selectors.EVENT_READ, ("sink", None))
        for sink in self.sinks:
            sink.start()

    def woken(self) -> None:
        """A sink made room or went idle (its wake-up pipe, registered as ``("sink", None)``)."""
        drain(self._wake)

    def watch(self, now: float) -> float | None:
        """Watch the pipes whose sink has room and that are not paused; the time until one resumes."""
        resume: float | None = None
        for stream in self.streams.values():
            if stream.sink.full:
                stream.sink.want_wake = True  # before the check below: no wake-up can be missed
            want = not stream.sink.full and now >= stream.resume_at
            if want != stream.watched:
                if want:
                    self.sel.register(stream.fd, selectors.EVENT_READ, ("pipe", stream))
                else:
                    self.sel.unregister(stream.fd)
                stream.watched = want
            if not want and not stream.sink.full:
                wait = stream.resume_at - now
                resume = wait if resume is None else min(resume, wait)
        return resume

    def wake_when_written(self) -> None:
        """The ranks are gone: wake the loop as the sinks drain."""
        for sink in self.sinks:
            sink.want_wake = True

    def read_ready(self, stream: RankStream) -> None:
        """The selector says ``stream``'s pipe is ready."""
        if self.streams.get(stream.fd) is stream:  # not closed earlier in this round
            self._catch_up(stream)
            self._read(stream)

    def read_last_stderr(self, rank: int) -> None:
        """A rank failed: its last stderr lines may still be in the pipe, and they belong in the summary."""
        for stream in [s for s in self.by_rank.get(rank, ()) if s.is_err and s.fd in self.streams]:
            for _ in range(TAIL_READS):
                if not self._read(stream):
                    break

    def stop_reading(self) -> None:
        """Close every pipe (what holds them open outlived its rank)."""
        for stream in list(self.streams.values()):
            self._close(stream)

    def _catch_up(self, stream: RankStream) -> None:
        """Before new output of a rank, what its paused bar stream holds: keep its order across the two pipes."""
        for other in self.by_rank[stream.rank]:
            if other is not stream and other.fd in self.streams and other.resume_at > time.monotonic():
                other.resume_at = 0.0
                while self._read(other) == READ_SIZE:
                    pass

    def _read(self, stream: RankStream) -> int:
        """Read one chunk from a rank's pipe into its sink; its size (0: nothing to read, or the end)."""
        try:
            chunk = os.read(stream.fd, READ_SIZE)
        except BlockingIOError:
            return 0
        now = time.monotonic()
        self.on_read(stream.rank, chunk, stream.is_err, now)
        if not chunk:
            self._close(stream)
            return 0
        if stream.log is not None:
            stream.log.write(chunk)
            stream.log.flush()
        pieces, bar = stream.relay.feed(chunk)
        stream.put(pieces, bar)
        if stream.relay.barred and len(chunk) < READ_SIZE:
            if not stream.roomy:
                stream.roomy = True
                enlarge_pipe(stream.fd)  # the rank writes on while we pause
            stream.resume_at = now + BAR_PAUSE
        return len(chunk)

    def _close(self, stream: RankStream) -> None:
        if stream.watched:
            self.sel.unregister(stream.fd)
        del self.streams[stream.fd]
        stream.pipe.close()
        stream.put(stream.relay.close(), None)

    # ---- the console collapse -------------------------------------------------
    def next_due(self, now: float) -> float | None:
        """Seconds until a collapsed line is due (None: none held)."""
        due = [max(0.0, at - now) for held in self.collapses.values() if (at := held.next_due()) is not None]
        return min(due) if due else None

    def tick(self, now: float) -> None:
        for held in self.collapses.values():
            held.tick(now)

    def flush_held(self) -> None:
        """Every collapsed line held, out (the end)."""
        for held in self.collapses.values():
            held.flush()

    def rank_failed(self) -> None:
        """What the ranks' lines held prints before the failure is known, here or in the launcher."""
        self.flush_held()
        if self._flush_mark:
            self.err_sink.put(self, [wire.FLUSH_LINE.encode() + b"\n"])

    def put_stacks(self, stacks: Iterable[tuple[int, str]]) -> None:
        """Each rank's stack, on stderr with its prefix; nothing collapses while they print."""
        for held in self.collapses.values():
            held.pause_for_stacks(time.monotonic())
        for rank, text in stacks:
            if rank in self.prefixes:
                self.err_sink.put(self, [self.prefixes[rank] + text.encode() + b"\n"])

    # ---- the sinks ----------------------------------------------------------
    def put_urgent(self, line: bytes) -> None:
        """An event line on stdout, before the output queued there."""
        self.out_sink.put_urgent(line)

    def abandon_stalled(self, stall: float) -> list[int]:
        """Give up on each sink whose reader took nothing for ``stall`` seconds; their fds."""
        given_up = []
        for sink in self.sinks:
            if not sink.dead and sink.stalled(stall):
                sink.abandon()
                given_up.append(sink.fd)
        return given_up

    def finish(self) -> None:
        """The end: every collapsed line held, out; the status line goes, before this agent's last event (the
        launcher's summary follows it)."""
        self.flush_held()
        self.out_sink.end_status_line(STALL)

    def wait_idle(self, stall: float | None) -> None:
        for sink in self.sinks:
            sink.wait_idle(stall)

    def console(self) -> SinkWriter:
        """A stand-in for ``sys.stderr``: the agent's own log lines queue with the ranks' stderr."""
        return SinkWriter(self.err_sink)


class SinkWriter:
    """A text file whose writes queue in a sink (the node agent's ``sys.stderr``)."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    def write(self, text: str) -> int:
        self.sink.put(self, [text.encode("utf-8", "replace")])
        return len(text)

    def flush(self) -> None:
        pass
