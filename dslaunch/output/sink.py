"""Output on its way to one file descriptor: a bounded queue that one writer thread drains.

Whoever feeds a sink never blocks on the reader at the other end: the node agent stops reading
a rank's pipe while its sink is ``full`` (so a slow or stopped reader slows the ranks, whose
writes block, never the agent's handling of exits and signals), and memory stays near
``budget``. The writer writes whole lines; on a terminal it also writes each stream's latest
``\\r`` state (a progress bar), replaced by a newer one while the writer is still busy.
A reader that stopped (``stalled``) can be given up on with ``abandon``; from then on
everything is dropped. The writer thread runs while the sink is in use: it ends once the sink is dead, or
``close``d with nothing left to write (a later ``put`` starts another), so a sink made and dropped costs no thread
for good (``write_within``: a sink a line). On a terminal it may keep the status line below everything it writes
(``status_line``, ``output/status_line.py``), erased before each batch and drawn again after it; a rank's live
progress bar takes that line while it lasts.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections import deque
from collections.abc import Sequence

from dslaunch.output.relay import Piece
from dslaunch.output.status_line import ERASE, StatusLine, fit

BUDGET = 4 << 20  # bytes accepted and not yet written, before the feeder must stop
# While stopping, at exit or for a summary: a reader that takes nothing this long is given up on (every side uses it)
STALL = 0.5
_WRITE = 256 << 10  # per writev: small enough that a slow reader still shows progress often
_IOV = 512
REDRAW = 0.5  # seconds between two looks at the status line's text while nothing else is written


class Sink:
    def __init__(self, fd: int, *, budget: int = BUDGET, live: bool = False, wake: int | None = None) -> None:
        self.fd = fd
        self.budget = budget
        self.live = live  # a terminal: \r states are shown as they come
        self._wake = wake  # written to after a write while the feeder waits for room or idleness
        self._cond = threading.Condition()
        self._items: deque[tuple[object, Sequence[Piece]]] = deque()
        self._urgent: deque[bytes] = deque()
        self._bars: dict[object, bytes] = {}
        self.queued = 0  # bytes accepted and not written yet
        self._busy = False
        self.dead = False  # the reader is gone (EPIPE) or was given up on: everything is dropped
        self.progress = time.monotonic()
        self.want_wake = False
        self._dangling: object = None  # the stream whose bar the cursor sits after (terminal)
        self._started = False  # start() was called: from then on a writer runs while there is something to write
        self._writer = False  # a writer thread runs now
        self._closed = False  # close() was called: the writer ends once idle
        self.status_line: StatusLine | None = None  # the line this sink draws below its output (live: a terminal)
        self._drawn = b""  # the status line on the screen now, the cursor after it
        self._line_open = False  # the output written last ended without a newline

    def start(self) -> None:
        with self._cond:
            self._started = True
            self._spawn()

    def close(self) -> None:
        """Nothing more is expected: the writer ends once everything queued is written (a later put starts one)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def retired(self) -> bool:
        """Dead, and no write of its own is stuck on the reader any more: a new sink on its descriptor may take over."""
        with self._cond:
            return self.dead and not self._writer

    def _spawn(self) -> None:  # with self._cond held
        waiting = self._items or self._urgent or self._bars
        if self._started and not self._writer and (waiting or not self._ending()):
            self._writer = True
            threading.Thread(target=self._run, name=f"dslaunch-sink-{self.fd}", daemon=True).start()

    def _ending(self) -> bool:  # with self._cond held, nothing queued
        return self.dead or (self._closed and self.status_line is None and not self._drawn)

    @property
    def full(self) -> bool:
        return self.queued >= self.budget and not self.dead

    @property
    def idle(self) -> bool:
        with self._cond:
            return self.dead or not (self._busy or self._items or self._urgent or self._bars)

    def stalled(self, seconds: float) -> bool:
        """Busy with a write that has made no progress for ``seconds``."""
        return self._busy and time.monotonic() - self.progress > seconds

    def put(self, key: object, pieces: Sequence[Piece], bar: bytes | None = None) -> None:
        """Queue ``pieces`` (whole lines) of stream ``key``; ``bar`` is its live state (None: none)."""
        size = sum(len(p) for p in pieces)
        with self._cond:
            if self.dead:
                return
            if size:
                self._items.append((key, pieces))
                self.queued += size
            if bar is None:
                self._bars.pop(key, None)
            else:
                self._bars[key] = bar
            self._spawn()
            self._cond.notify_all()

    def put_wait(self, key: object, data: bytes) -> None:
        """Like ``put``, but wait while the queue is full (a feeder that may block: back-pressure)."""
        with self._cond:
            while self.queued >= self.budget and not self.dead:
                self._cond.wait()
        self.put(key, [data])

    def put_urgent(self, data: bytes) -> None:
        """A line that goes before everything queued (an event sharing the stream with output)."""
        with self._cond:
            if not self.dead:
                self._urgent.append(data)
                self._spawn()
                self._cond.notify_all()

    def abandon(self) -> None:
        with self._cond:
            self.dead = True
            self._items.clear()
            self._urgent.clear()
            self._bars.clear()
            self.queued = 0
            self.status_line, self._drawn = None, b""
            self._cond.notify_all()

    def wait_idle(self, stall: float | None) -> None:
        """Until everything is written; with ``stall``, give up once a write makes no progress that long."""
        self.start()
        with self._cond:
            while not (self.dead or not (self._busy or self._items or self._urgent or self._bars)):
                if stall is not None and self.stalled(stall):
                    break
                self._cond.wait(0.05)
        if stall is not None and not self.idle:
            self.abandon()

    def end_status_line(self, stall: float) -> None:
        """No status line from now on; the one on the screen is erased (waited for up to ``stall`` seconds)."""
        with self._cond:
            self.status_line = None
            self._cond.notify_all()
            end = time.monotonic() + stall
            while (self._drawn or self._busy) and not self.dead and (left := end - time.monotonic()) > 0:
                self._cond.wait(left)  # the erase is written once the writer is idle with nothing drawn

    def _status_text(self) -> bytes:
        """The status line as it should stand now (b"": none, or a bar holds the last line)."""
        if self.status_line is None or not self.live or self._dangling is not None:
            return b""
        try:
            columns = os.get_terminal_size(self.fd).columns
        except OSError:
            columns = 80
        return fit(self.status_line.read(), columns)

    def _status_row(self, batch: list[Piece]) -> list[Piece]:
        """The status line to draw after ``batch``: on a line of its own, should output end without a newline."""
        last = next((piece for piece in reversed(batch) if len(piece) and piece is not ERASE), None)
        if last is not None:
            self._line_open = bytes(last[-1:]) != b"\n"
        self._drawn = self._status_text()
        if not self._drawn:
            return []
        if not self._line_open:
            return [self._drawn]
        self._line_open = False  # the newline ends it: what follows starts on the status line's row, erased first
        return [b"\n", self._drawn]

    def _status_stale(self) -> bool:
        return self._status_text() != self._drawn

    # ---- the writer thread ------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._items or self._urgent or self._bars):
                    if self._ending():
                        self._writer = False
                        return
                    if self.status_line is None and not self._drawn:
                        self._cond.wait()
                    elif self._status_stale():
                        break
                    else:
                        self._cond.wait(REDRAW)
                bufs: list[Piece] = [ERASE] if self._drawn else []
                bufs.extend(self._urgent)
                self._urgent.clear()
                for key, pieces in self._items:
                    if self._dangling is not None and key != self._dangling:
                        bufs.append(b"\n")  # never glue a line onto another stream's bar
                    self._dangling = None
                    bufs.extend(pieces)
                self._items.clear()
                for key, bar in self._bars.items():
                    if self._dangling is not None and key != self._dangling:
                        bufs.append(b"\n")
                    self._dangling = key
                    bufs.append(bar)
                self._bars.clear()
                bufs.extend(self._status_row(bufs))
                self.queued = sum(len(b) for b in bufs)  # all of it is in this batch now, bars included
                self._busy = True
                self.progress = time.monotonic()
            self._write_all(bufs)
            with self._cond:
                self._busy = False
                self._cond.notify_all()
            self._poke()

    def _written(self, n: int) -> None:
        with self._cond:
            self.queued = max(0, self.queued - n)
            self.progress = time.monotonic()
            self._cond.notify_all()
        if self.queued < self.budget // 2:
            self._poke()

    def _poke(self) -> None:
        if self.want_wake and self._wake is not None:
            self.want_wake = False
            try:
                os.write(self._wake, b"\0")
            except OSError:
                pass

    def _write_all(self, bufs: list[Piece]) -> None:
        pending = deque(memoryview(b) for b in bufs if len(b))
        while pending and not self.dead:
            batch: list[memoryview] = []
            size = 0
            for view in pending:
                batch.append(view)
                size += len(view)
                if size >= _WRITE or len(batch) >= _IOV:
                    break
            try:
                n = os.writev(self.fd, batch)
            except BlockingIOError:  # someone made the shared file description non-blocking
                select.select([], [self.fd], [], 1.0)
                continue
            except OSError:  # EPIPE and the like: nobody will read the rest
                self.abandon()
                return
            self._written(n)
            while n:
                head = pending[0]
                if n >= len(head):
                    n -= len(head)
                    pending.popleft()
                else:
                    pending[0] = head[n:]
                    n = 0


def write_within(fd: int, data: bytes, timeout: float) -> bool:
    """Write ``data`` to ``fd`` unless that takes longer than ``timeout`` (a reader that stopped reading). The
    sink's writer ends once it has written (or, given up on, once its write returns): a line costs no thread."""
    sink = Sink(fd)
    sink.put(None, [data])
    sink.start()
    sink.close()
    sink.wait_idle(timeout)
    return not sink.dead
