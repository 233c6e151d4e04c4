"""output/lanes.py: output on its way to a stdout that may not be read; the reader of the transport never waits.

In-process (threads and a pipe, no process): the pdsh and ssh runners' real-process cases are in
test_unread_stdout.py.
"""

from __future__ import annotations

import os
import threading
import time

from dslaunch.output.lanes import HeldLines, OutputLane, flush
from dslaunch.output.sink import Sink


def _reader(fd: int, got: bytearray, start: threading.Event) -> threading.Thread:
    def read() -> None:
        start.wait()
        while chunk := os.read(fd, 1 << 16):
            got.extend(chunk)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_puts_never_wait_for_a_stopped_reader_and_nothing_is_lost_or_reordered() -> None:
    read_end, write_end = os.pipe()
    sink = Sink(write_end, budget=64 << 10)
    sink.start()
    lane = OutputLane(sink, "node", budget=32 << 10)
    got, start = bytearray(), threading.Event()
    reader = _reader(read_end, got, start)
    lines = [f"line {i:07d} {'x' * 80}\n" for i in range(100_000)]  # 9 MB: far past the sink and the memory budget

    def feed() -> None:
        for i in range(0, len(lines), 50):
            lane.put("".join(lines[i : i + 50]))

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    feeder.join(10)
    blocked = feeder.is_alive()
    assert lane.held.spilled > 0  # the rest waited on disk
    start.set()
    lane.close()
    flush([lane], sink, None)
    os.close(write_end)
    reader.join(10)
    os.close(read_end)
    assert not blocked, "a put waited for the reader"
    assert got.decode() == "".join(lines)
    assert lane.held.spill is None and lane.dropped == 0


def test_past_the_cap_output_is_dropped_and_counted() -> None:
    held = HeldLines(budget=10, cap=100)
    for _ in range(30):
        held.put("0123456789")  # one in memory, records of 14 bytes spilled up to the cap, the rest dropped
    held.put("@event\n", urgent=True)
    held.put(None)
    items = []
    while (item := held.get()) is not None:
        items.append(item)
    assert held.dropped == 30 * 10 - 10 * len(items[:-1])
    assert items[1] == "@event\n"  # the event went ahead of the spilled output
    assert held.spill is None


def test_flush_gives_up_on_a_stalled_sink_only_when_asked() -> None:
    read_end, write_end = os.pipe()
    sink = Sink(write_end, budget=64 << 10)
    sink.start()
    lane = OutputLane(sink, "node")
    for _ in range(100):
        lane.put("y" * 10_000 + "\n")  # 1 MB into a pipe of 64 KiB that nobody reads
    lane.close()
    began = time.monotonic()
    flush([lane], sink, 0.3)
    assert time.monotonic() - began < 5.0
    assert sink.dead
    os.close(read_end)
    os.close(write_end)
