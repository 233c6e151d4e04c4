"""The channel's event loop (channel/event_loop.py): calls from other threads, timers, and a failing handler that ends
nothing else, on a real socket pair."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from dslaunch.channel.event_loop import READ, Loop


@pytest.fixture
def loop() -> Iterator[Loop]:
    running = Loop("test loop")
    running.start()
    yield running
    running.stop()


def _on_loop(loop: Loop, fn: object) -> object:
    """``fn()`` run on the loop's thread, its result here."""
    done = threading.Event()
    got: list[object] = []
    loop.call_soon(lambda: (got.append(fn()), done.set()))  # type: ignore[operator]
    assert done.wait(5), "the loop did not run the call"
    return got[0]


def test_calls_from_other_threads_run_on_the_loop_in_the_order_each_thread_made_them(loop: Loop) -> None:
    seen: list[tuple[int, int]] = []
    threads_seen: set[int] = set()

    def note(who: int, n: int) -> None:
        seen.append((who, n))
        threads_seen.add(threading.get_ident())

    def caller(who: int) -> None:
        for n in range(500):
            loop.call_soon(note, who, n)

    callers = [threading.Thread(target=caller, args=(who,)) for who in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    _on_loop(loop, lambda: None)
    assert len(seen) == 2000
    for who in range(4):
        assert [n for w, n in seen if w == who] == list(range(500))
    assert threads_seen == {loop._thread.ident}


def test_timers_run_in_time_order_and_a_cancelled_one_never_runs(loop: Loop) -> None:
    ran: list[str] = []
    began = time.monotonic()

    def plan() -> None:
        loop.call_later(0.3, ran.append, "late")
        loop.call_later(0.1, ran.append, "early")
        loop.call_later(0.2, ran.append, "cancelled").cancel()

    _on_loop(loop, plan)
    while len(ran) < 2 and time.monotonic() - began < 5:
        time.sleep(0.02)
    time.sleep(0.15)
    assert ran == ["early", "late"]


def test_a_repeating_timer_repeats_until_cancelled(loop: Loop) -> None:
    ticks: list[float] = []
    timer = _on_loop(loop, lambda: loop.call_every(0.05, lambda: ticks.append(time.monotonic())))
    time.sleep(0.5)
    loop.call_soon(timer.cancel)  # type: ignore[attr-defined]
    _on_loop(loop, lambda: None)
    count = len(ticks)
    time.sleep(0.2)
    assert 5 <= count <= 11 and len(ticks) == count


class _Echo:
    """Reads a socket; raises on a line saying so (a handler's bug), which must end nothing else."""

    def __init__(self, sock: socket.socket, heard: list[bytes]) -> None:
        self.sock, self.heard = sock, heard

    def on_readable(self) -> None:
        data = self.sock.recv(4096)
        if data == b"raise":
            raise RuntimeError("a handler's bug")
        self.heard.append(data)

    def on_writable(self) -> None:
        return None


def test_a_handler_that_raises_is_counted_and_the_loop_serves_on(loop: Loop) -> None:
    a, b = socket.socketpair()
    heard: list[bytes] = []
    _on_loop(loop, lambda: loop.watch(a, _Echo(a, heard), READ))
    b.sendall(b"raise")
    deadline = time.monotonic() + 5
    while not loop.errors and time.monotonic() < deadline:
        time.sleep(0.01)
    b.sendall(b"after")
    while not heard and time.monotonic() < deadline:
        time.sleep(0.01)
    assert loop.errors == 1 and heard == [b"after"]
    _on_loop(loop, lambda: loop.forget(a))
    a.close()
    b.close()


def test_stop_ends_the_thread() -> None:
    loop = Loop("stopped")
    loop.start()
    loop.stop()
    assert not loop.running
    loop.call_soon(print, "never")  # after the end: nothing runs, nothing raises


def test_a_paced_loop_serves_what_came_meanwhile_in_one_turn() -> None:
    """``pace``: at most one look at the sockets every ``pace`` seconds, however often a line comes (a byte every
    2 ms here: 300 of them, in a handful of reads)."""
    paced = Loop("paced", pace=0.1)
    here, there = socket.socketpair()
    here.setblocking(False)
    reads: list[int] = []

    class Reader:
        def on_readable(self) -> None:
            reads.append(len(here.recv(1 << 16)))

        def on_writable(self) -> None:
            pass

    paced.start()
    try:
        _on_loop(paced, lambda: paced.watch(here, Reader(), READ))
        began = time.monotonic()
        for _ in range(300):
            there.send(b"x")
            time.sleep(0.002)
        took = time.monotonic() - began
        deadline = time.monotonic() + 5
        while sum(reads) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(reads) == 300
        assert len(reads) <= took / 0.1 + 3, (len(reads), took)
    finally:
        paced.stop()
        here.close()
        there.close()
