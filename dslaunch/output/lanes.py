"""Remote agents' output on its way to our stdout and stderr, never holding up whoever reads it in.

A remote agent's events and output come over one stream (an ssh channel, pdsh's one pipe), so the thread that
reads the stream must never wait for our stdout: a reader of it that stops (``dslaunch ... | sleep 60``) would
leave the events behind the output unread, and fail-fast with them. So output goes into a :class:`HeldLines`
(memory up to a budget, then a spill file, then, past ``SPILL_CAP`` waiting on disk, dropped and counted) and a
thread of the :class:`OutputLane` passes it on into the shared bounded sink, waiting for room there.
Back-pressure stops at the lane: the ranks are not slowed by a slow reader, the disk takes the difference.
"""

from __future__ import annotations

import atexit
import collections
import os
import threading
import time
from typing import IO

from dslaunch.output import collapse_launcher
from dslaunch.output.sink import STALL, Sink

MEMORY = 512 << 10  # bytes a lane holds in memory before it spills
SINK_BUDGET = 2 << 20  # bytes the launcher's stdout sink accepts ahead of its reader (the agent's: sink.BUDGET)
SPILL_CAP = 1 << 30  # bytes a lane lets wait on disk; more is dropped (and counted) until the reader catches up


class HeldLines:
    """Lines waiting for a slow consumer: ``put`` never waits, ``get`` waits for the next one, in order.

    Up to ``budget`` bytes wait in memory, more go to a spill file (deleted when closed) and are passed on in
    order once the consumer catches up; past ``cap`` bytes on disk, output is dropped and counted in
    ``dropped``. ``urgent`` items (events) go to memory whatever the budget, so they never wait behind spilled
    output.
    """

    def __init__(self, budget: int = MEMORY, cap: int = SPILL_CAP) -> None:
        self.items: collections.deque[str] = collections.deque()
        self.size = 0
        self.budget = budget
        self.cap = cap
        self.ended = False
        self.spill: IO[bytes] | None = None
        self.spilled = 0  # bytes written to the spill file
        self.unspilled = 0  # bytes of it passed on
        self.dropped = 0  # bytes of output given up on (the disk backlog was over the cap)
        self.cond = threading.Condition()

    def put(self, item: str | None, *, urgent: bool = False) -> None:
        """Output, an event (``urgent``), or None: the end, after everything already put."""
        with self.cond:
            if item is None:
                self.ended = True
            elif urgent or (self.spilled == self.unspilled and self.size + len(item) <= self.budget):
                self.items.append(item)
                self.size += len(item)
            elif self.spilled - self.unspilled + len(item) > self.cap:
                self.dropped += len(item)
            else:
                self._spill(item.encode())
            self.cond.notify_all()

    def _spill(self, data: bytes) -> None:
        if self.spill is None:
            import tempfile

            self.spill = tempfile.TemporaryFile(prefix="dslaunch-held-")
        record = len(data).to_bytes(4, "big") + data
        os.pwrite(self.spill.fileno(), record, self.spilled)
        self.spilled += len(record)

    def get(self) -> str | None:
        with self.cond:
            while not self.items and self.spilled == self.unspilled and not self.ended:
                self.cond.wait()
            if self.items:
                item = self.items.popleft()
                self.size -= len(item)
                return item
            if self.spill is not None and self.unspilled < self.spilled:
                fd = self.spill.fileno()
                length = int.from_bytes(os.pread(fd, 4, self.unspilled), "big")
                data = os.pread(fd, length, self.unspilled + 4)
                self.unspilled += 4 + length
                return data.decode("utf-8", "replace")
            self.discard()
            return None

    def discard(self) -> None:
        """Forget everything held (the consumer is gone); the end, if put, still comes."""
        with self.cond:
            self.items.clear()
            self.size = 0
            self.spilled = self.unspilled = 0
            if self.spill is not None:
                self.spill.close()
                self.spill = None
            self.cond.notify_all()


class OutputLane:
    """One stream's output on its way into a shared sink under ``key``: :meth:`put` never waits.

    While nothing is held and the sink has room, output goes into the sink at once, in the caller's thread (no
    hand-over to the lane's thread for the common case, a reader that keeps up)."""

    def __init__(self, sink: Sink, key: object, *, budget: int = MEMORY, cap: int = SPILL_CAP) -> None:
        self.sink = sink
        self.key = key
        self.held = HeldLines(budget, cap)
        self._moving = False  # the lane's thread is passing an item on: nothing may overtake it
        self._thread = threading.Thread(target=self._move, name=f"dslaunch-lane-{key}", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        return self.held.dropped

    def put(self, text: str) -> None:
        if self.sink.dead:
            return
        held = self.held
        with held.cond:
            if self._moving or held.items or held.spilled != held.unspilled or self.sink.full:
                held.put(text)
            else:
                self.sink.put(self.key, [text.encode("utf-8", "replace")])

    def close(self) -> None:
        """No more output: the lane ends once everything held has been passed on (or the sink is dead)."""
        self.held.put(None)

    def idle(self) -> bool:
        """Nothing held and nothing on its way into the sink."""
        with self.held.cond:
            return not (self._moving or self.held.items or self.held.spilled != self.held.unspilled)

    def join(self, timeout: float | None) -> bool:
        """Whether everything was passed on (the lane ended) within ``timeout``."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _move(self) -> None:
        while (text := self._take()) is not None:
            if self.sink.dead:
                self.held.discard()
            else:
                self.sink.put_wait(self.key, text.encode("utf-8", "replace"))

    def _take(self) -> str | None:
        with self.held.cond:  # a Condition on an RLock: get() waits on it too
            self._moving = False
            text = self.held.get()
            self._moving = text is not None
            return text


def flush(lanes: list[OutputLane], sink: Sink, stall: float | None, poll: float = 0.05) -> None:
    """Wait until the (closed) lanes and ``sink`` have written everything; with ``stall``, give up once
    the sink's reader has taken nothing for that long."""
    for lane in lanes:
        while not lane.join(poll):
            if stall is not None and sink.stalled(stall):
                sink.abandon()
    sink.wait_idle(stall)


class ErrLane:
    """Our stderr for remote agents' stderr and a remote runner's own words: one lane, so order is kept and no
    reader of a remote stderr stream (or a runner's message) waits for a stderr nobody reads. A remote runner owns
    one (``runners/remote/base.RemoteRunner.err``) and passes it down: to its readers, and to ``job.loop.supervise``,
    whose attempt's console (``output/remote_console.py``) alone sets and clears ``collapse``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lane: OutputLane | None = None
        self.collapse: collapse_launcher.LineCollapse | None = None  # while a job runs: its remote ranks' lines

    def write(self, data: bytes, *, collapse: bool = True) -> None:
        text = data.decode("utf-8", "replace")
        held = self.collapse if collapse else None
        text = collapse_launcher.without_flush_lines(text) if held is None else held.feed(text, time.monotonic())
        if not text:
            return
        with self.lock:
            if self.lane is not None and self.lane.sink.dead and not self.lane.sink.retired:
                return  # a write to a stderr given up on is still stuck: dropped, as the given-up sink would
            if self.lane is None or self.lane.sink.dead:  # a stderr given up on gets a new chance
                if self.lane is None:
                    atexit.register(self.flush, STALL)  # at exit: until written, or stalled that long
                else:
                    self.lane.close()
                sink = Sink(2)
                sink.start()
                self.lane = OutputLane(sink, "stderr")
            lane = self.lane
        lane.put(text)

    def flush(self, stall: float | None) -> None:
        """Until everything written so far is out (with ``stall``: or stderr took nothing that long)."""
        with self.lock:
            lane = self.lane
        if lane is None:
            return
        while not lane.idle():
            if stall is not None and lane.sink.stalled(stall):
                lane.sink.abandon()
            time.sleep(0.01)
        lane.sink.wait_idle(stall)
