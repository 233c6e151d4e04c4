"""The sink's writer thread: alive while the sink is in use, gone once it is dropped (a long job says many lines)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

import pytest

from dslaunch.output.sink import Sink, write_within
from tests.helpers import threads_since, until


def _drain(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_many_lines_said_leave_no_writer_thread_and_all_arrive_in_order(pipe: tuple[int, int]) -> None:
    r, w = pipe
    before = set(threading.enumerate())
    lines = [f"line {i}\n".encode() for i in range(200)]
    assert all(write_within(w, line, 5.0) for line in lines)
    assert _drain(r) == b"".join(lines)
    assert until(lambda: not threads_since(before)), threads_since(before)  # a thread a line, before


def test_a_closed_sink_writes_everything_then_ends_its_writer_and_a_later_put_starts_one(pipe: tuple[int, int]) -> None:
    r, w = pipe
    before = set(threading.enumerate())
    sink = Sink(w)
    sink.put("a", [b"first\n"])
    sink.start()
    sink.close()
    assert until(lambda: not threads_since(before))
    sink.put("a", [b"second\n"])
    sink.wait_idle(5.0)
    assert _drain(r) == b"first\nsecond\n"
    assert until(lambda: not threads_since(before))


def test_a_line_to_a_reader_that_stopped_is_given_up_and_its_writer_ends_when_the_reader_is_back(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    before = set(threading.enumerate())
    filler = b"x" * (1 << 20)  # more than the pipe holds: the write blocks
    started = time.monotonic()
    assert not write_within(w, filler, 0.3)
    assert time.monotonic() - started < 2.0
    assert len(threads_since(before)) == 1  # its write is still blocked
    os.set_blocking(r, False)

    def reader_back() -> bool:  # the blocked write returns, and the writer sees it was given up on
        _drain(r)
        return not threads_since(before)

    assert until(reader_back), threads_since(before)
    assert write_within(w, b"back\n", 5.0)
    assert _drain(r).endswith(b"back\n")
