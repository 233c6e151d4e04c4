"""One thread that serves many sockets: a selector, a timer heap, and calls handed in from other threads.

Everything a :class:`Loop` runs (a socket's handler, a timer, a call) runs on its one thread, one at a time, and
must never block: a handler reads what is there and writes what fits, and keeps the rest. Other threads never
touch what the loop owns; they hand it work with :meth:`Loop.call_soon`, which wakes the loop through a socket
pair. A handler that raises is logged and the loop goes on: one bad connection never ends the others.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import select
import selectors
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE
IDLE_WAIT = 1.0  # the longest select while no timer is due (a stop comes through the wakeup anyway)
BATCH = 512  # sockets served per turn at most: timers and calls run between batches (heartbeats keep flowing
# while thousands of handshakes are ready at once)


class Handler(Protocol):
    def on_readable(self) -> None: ...

    def on_writable(self) -> None: ...


class Timer:
    __slots__ = ("args", "cancelled", "fn", "when")

    def __init__(self, when: float, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when, self.fn, self.args = when, fn, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Loop:
    def __init__(self, name: str = "dslaunch channel", pace: float = 0.0) -> None:
        """``pace``: the shortest time between two looks at the sockets (each wakeup serves what came meanwhile,
        not one line: thousands of links' heartbeats cost fewer turns), at the price of as much latency."""
        self.name = name
        self.pace = pace
        self._looked = 0.0
        self._poll = _Poller()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._poll.register(self._wake_r, READ, None)
        self._calls: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._woken = False
        self._timers: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ident: int | None = None
        self.errors = 0  # handlers, timers and calls that raised (each logged)

    # ---- any thread --------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def in_loop(self) -> bool:
        return threading.get_ident() == self._ident

    def call_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop's thread, after the calls handed in before it (thread-safe)."""
        self._calls.append((fn, args))
        if not self._woken:
            self._woken = True
            try:
                self._wake_w.send(b"\0")
            except OSError:  # full (the loop is waking anyway) or closed (the loop has stopped)
                pass

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop (after the calls handed in before this one) and wait for its thread; what is registered
        is left to its owners to close."""
        if not self._thread.is_alive():
            self._close()
            return
        self.call_soon(self._set_stopping)
        if not self.in_loop():
            self._thread.join(timeout)

    # ---- the loop's thread only --------------------------------------------------------------------------------
    def call_later(self, delay: float, fn: Callable[..., object], *args: Any) -> Timer:
        timer = Timer(time.monotonic() + delay, fn, args)
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def call_every(self, interval: float, fn: Callable[[], object]) -> Timer:
        """Run ``fn()`` every ``interval`` seconds, from now on, until the returned timer is cancelled."""
        timer = Timer(time.monotonic() + interval, fn, ())

        def again() -> None:
            if timer.cancelled:
                return
            fn()
            timer.when = max(timer.when + interval, time.monotonic())
            heapq.heappush(self._timers, (timer.when, next(self._order), timer))

        timer.fn = again
        heapq.heappush(self._timers, (timer.when, next(self._order), timer))
        return timer

    def watch(self, sock: socket.socket, handler: Handler, events: int = READ) -> None:
        self._poll.register(sock, events, handler)

    def interest(self, sock: socket.socket, handler: Handler, events: int) -> None:
        """What ``sock`` is watched for from now on: ``READ``, ``WRITE`` or both."""
        self._poll.modify(sock, events, handler)

    def forget(self, sock: socket.socket) -> None:
        """Stop watching ``sock`` (before closing it); a socket not watched is fine."""
        self._poll.unregister(sock)

    def _set_stopping(self) -> None:
        self._stopping = True

    def _run(self) -> None:
        self._ident = threading.get_ident()
        try:
            while not self._stopping:
                self._turn()
        finally:
            self._close()

    def _turn(self) -> None:
        if self._calls:
            wait: float | None = 0.0
        elif self._timers:
            wait = min(IDLE_WAIT, max(0.0, self._timers[0][0] - time.monotonic()))
        else:
            wait = IDLE_WAIT
        if self.pace and wait:
            gap = min(wait, self._looked + self.pace - time.monotonic())
            if gap > 0:
                time.sleep(gap)
                wait -= gap
        self._looked = time.monotonic()
        for handler, mask in self._poll.ready(wait):
            if handler is None:
                self._drain_wakeup()
                continue
            try:
                if mask & READ:
                    handler.on_readable()
                if mask & WRITE:
                    handler.on_writable()
            except Exception:  # noqa: BLE001 - one connection's fault never ends the others
                self._log("a channel handler failed")
        self._due_timers()
        for _ in range(len(self._calls)):
            fn, args = self._calls.popleft()
            try:
                fn(*args)
            except Exception:  # noqa: BLE001
                self._log("a call on the channel loop failed")

    def _drain_wakeup(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except OSError:
            pass
        self._woken = False  # after the drain: a call handed in from now on wakes the loop again

    def _due_timers(self) -> None:
        now = time.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _when, _n, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            try:
                timer.fn(*timer.args)
            except Exception:  # noqa: BLE001
                self._log("a timer on the channel loop failed")

    def _log(self, what: str) -> None:
        self.errors += 1
        logging.getLogger("dslaunch.channel").exception("%s (%s)", what, self.name)

    def _close(self) -> None:
        self._poll.close()
        self._wake_r.close()
        self._wake_w.close()


class _Poller:
    """The sockets watched, their handlers, and which are ready: epoll where there is one (at most ``BATCH`` a
    turn; the rest stay ready for the next), else ``selectors``."""

    def __init__(self) -> None:
        self._handlers: dict[int, Handler | None] = {}
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._sel = selectors.DefaultSelector() if self._epoll is None else None

    def register(self, sock: socket.socket, events: int, handler: Handler | None) -> None:
        fd = sock.fileno()
        if self._epoll is not None:
            self._epoll.register(fd, _epoll_mask(events))
        else:
            assert self._sel is not None
            self._sel.register(fd, events, handler)
        self._handlers[fd] = handler

    def modify(self, sock: socket.socket, events: int, handler: Handler) -> None:
        fd = sock.fileno()
        if self._epoll is not None:
            self._epoll.modify(fd, _epoll_mask(events))
        else:
            assert self._sel is not None
            self._sel.modify(fd, events, handler)
        self._handlers[fd] = handler

    def unregister(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        if self._handlers.pop(fd, _NOT_WATCHED) is _NOT_WATCHED or fd < 0:
            return
        try:
            if self._epoll is not None:
                self._epoll.unregister(fd)
            else:
                assert self._sel is not None
                self._sel.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass

    def ready(self, wait: float | None) -> list[tuple[Handler | None, int]]:
        handlers = self._handlers
        if self._epoll is None:
            assert self._sel is not None
            return [(handlers.get(key.fd), mask) for key, mask in self._sel.select(wait)]
        got = []
        for fd, mask in self._epoll.poll(-1 if wait is None else wait, BATCH):
            if fd in handlers:
                events = (READ if mask & _EPOLL_READ else 0) | (WRITE if mask & select.EPOLLOUT else 0)
                got.append((handlers[fd], events or READ))  # an error or a hang-up: the read finds out
        return got

    def close(self) -> None:
        if self._epoll is not None:
            self._epoll.close()
        if self._sel is not None:
            self._sel.close()


_NOT_WATCHED = object()
_EPOLL_READ = getattr(select, "EPOLLIN", 1) | getattr(select, "EPOLLHUP", 16) | getattr(select, "EPOLLERR", 8)


def _epoll_mask(events: int) -> int:
    return (select.EPOLLIN if events & READ else 0) | (select.EPOLLOUT if events & WRITE else 0)
