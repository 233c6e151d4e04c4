"""The sink's writer thread: alive while the sink is in use, gone once it is dropped (a long job says many lines)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dslaunch.output import sink as sink_module
from dslaunch.output.sink import Sink, write_within
from tests.helpers import threads_since


def _until(check, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


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


def test_many_lines_said_cost_at_most_one_writer_thread_and_all_arrive_in_order() -> None:
    r, w = os.pipe()
    before = set(threading.enumerate())
    try:
        lines = [f"line {i}\n".encode() for i in range(200)]
        assert all(write_within(w, line, 5.0) for line in lines)
        assert len(threads_since(before)) <= 1
        assert _drain(r) == b"".join(lines)
        assert _until(lambda: not threads_since(before)), threads_since(before)  # idle: the writer ended too
    finally:
        os.close(r)
        os.close(w)


def test_a_closed_sink_writes_everything_then_ends_its_writer_and_a_later_put_starts_one() -> None:
    r, w = os.pipe()
    before = set(threading.enumerate())
    try:
        sink = Sink(w)
        sink.put("a", [b"first\n"])
        sink.start()
        sink.close()
        assert _until(lambda: not threads_since(before))
        sink.put("a", [b"second\n"])
        sink.wait_idle(5.0)
        assert _drain(r) == b"first\nsecond\n"
        assert _until(lambda: not threads_since(before))
    finally:
        os.close(r)
        os.close(w)


def test_a_reader_that_stopped_costs_one_stuck_thread_however_many_lines_follow() -> None:
    """Lines said while the one write to a stopped reader is stuck are dropped at once (not a thread, nor a
    half-second, each); once the reader reads again, the next line gets through and no thread is left behind."""
    r, w = os.pipe()
    before = set(threading.enumerate())
    try:
        os.set_blocking(w, True)
        filler = b"x" * (1 << 20)  # more than the pipe holds: the writer blocks
        assert not write_within(w, filler, 0.3)
        started = time.monotonic()
        assert not any(write_within(w, b"dropped\n", 0.3) for _ in range(50))
        assert time.monotonic() - started < 1.0
        assert len(threads_since(before)) == 1
        got = b""
        while len(got) < len(filler):  # the reader comes back
            got += os.read(r, 1 << 16)
        assert _until(lambda: not threads_since(before))
        assert write_within(w, b"back\n", 5.0)
        assert _drain(r).endswith(b"back\n")
        assert _until(lambda: not threads_since(before))
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.launch
def test_a_child_forked_while_a_line_was_being_said_says_its_own() -> None:
    """The fork comes while another thread holds write_within's lock (here: this one): the child gets a lock and a
    writer of its own, where it would wait for ever on the parent's."""
    r, w = os.pipe()
    try:
        assert write_within(w, b"parent\n", 5.0)
        with sink_module._OWN_LOCK:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os._exit(0 if write_within(w, b"child\n", 5.0) else 1)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        if done[0] == 0:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on the parent's lock")
        assert os.waitstatus_to_exitcode(done[1]) == 0
        assert _drain(r) == b"parent\nchild\n"
    finally:
        os.close(r)
        os.close(w)
