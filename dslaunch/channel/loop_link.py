"""One authenticated connection served on a :class:`~dslaunch.channel.event_loop.Loop` (no thread of its own): the
event loop's side of what ``channel/link.Link`` is with a thread, line for line the same on the wire.

Reads are bounded (``link.MAX_LINE`` a line, its MAC not counted) and every line's MAC is checked (``Sealer``);
what is written waits in a buffer bounded by ``MAX_OUT``: a peer that does not read what it is sent is ended
("stalled"), never blocking the loop or the other links. Any line heard counts as a heartbeat; a heartbeat is sent
only when nothing else was sent for ``HEARTBEAT`` seconds. A :class:`LinkClock` looks at each link about twice a
``HEARTBEAT``, a few links at a time (O(1) per link per look, nothing rescheduled per line): it sends the
heartbeats that are due and ends a link that was silent for ``SILENT`` seconds.

The callbacks (``on_line``, ``on_end``) and every method but :meth:`LoopLink.post` run on the loop's thread.
"""

from __future__ import annotations

import errno
import json
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

from dslaunch.channel.event_loop import READ, WRITE, Loop
from dslaunch.channel.link import HEARTBEAT, MAX_LINE, SILENT, TAG, Sealer

MAX_OUT = 4 << 20  # bytes waiting for a peer past what its socket holds; more: it does not read, it is ended
_HB_PAYLOAD = b'{"t":"hb"}'
_HB = _HB_PAYLOAD + b"\n"
_SLOTS = 5  # the clock looks at a fifth of the links at each tick
_READ_SIZE = 1 << 16
_AGAIN = (errno.EAGAIN, errno.EWOULDBLOCK)
# Linux, a link whose peer sends nothing shorter than a heartbeat (``long_lines``): it is reported readable only once
# more than a sealed heartbeat waits (any other line is longer, and an end is reported at once), so an idle peer's
# heartbeats are read two at a time: half the wakeups and reads (16,384 a second at 16,384 pods: docs/scale.md). The
# clock dates what waits unread by when the kernel took it in (TCP_INFO's tcpi_last_data_recv, in milliseconds)
# before it takes a link as silent.
_LOWAT = len(_HB_PAYLOAD) + TAG + 2 if sys.platform == "linux" else 0
_TCP_INFO = getattr(socket, "TCP_INFO", 11)
_LAST_DATA_RECV = struct.Struct("=I")  # at byte 52 of struct tcp_info, as since Linux 2.6


def _ignore(*_args: object) -> None:
    return None


def _since_last_data(sock: socket.socket) -> float | None:
    """Seconds since the kernel took in the last data on ``sock`` (Linux), or None."""
    if sys.platform != "linux" or sock.family == socket.AF_UNIX:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 104)
    except OSError:
        return None
    if len(info) < 56:
        return None
    milliseconds: int = _LAST_DATA_RECV.unpack_from(info, 52)[0]
    return milliseconds / 1000.0


class LinkClock:
    """Heartbeats and silence for every link on one loop: a wheel of ``_SLOTS`` slots, one visited per tick, so each
    link is looked at every ``HEARTBEAT / 2`` seconds (a silent link is ended within ``SILENT + HEARTBEAT / 2``).
    ``beat``: how often an idle link is sent a heartbeat (``link.server_beat``; its peer waits as many beats)."""

    def __init__(self, loop: Loop, beat: float = HEARTBEAT) -> None:
        self.loop = loop
        self.beat = beat
        self._slots: list[dict[LoopLink, None]] = [{} for _ in range(_SLOTS)]
        self._next = 0  # the slot a new link goes into (round robin)
        self._tick = 0
        self._timer = None if not loop.in_loop() else self._start()

    def _start(self) -> Any:
        return self.loop.call_every(HEARTBEAT / 2 / _SLOTS, self._visit)

    def add(self, link: LoopLink) -> None:
        if self._timer is None:
            self._timer = self._start()
        link.slot = self._next
        self._slots[self._next][link] = None
        self._next = (self._next + 1) % _SLOTS

    def remove(self, link: LoopLink) -> None:
        self._slots[link.slot].pop(link, None)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _visit(self) -> None:
        slot = self._slots[self._tick]
        self._tick = (self._tick + 1) % _SLOTS
        now = time.monotonic()
        silent_since = now - SILENT
        beat_before = now - self.beat + HEARTBEAT / 4  # looked at every HEARTBEAT / 2: a beat every ``beat`` or so
        for link in list(slot) if slot else ():
            if link.last_heard < silent_since:
                link.catch_up()
                if link.closed:
                    continue
                if link.last_heard < silent_since:
                    link.end("silent")
                    continue
            if link.last_sent < beat_before:
                link.beat(now)


class LoopLink:
    def __init__(
        self,
        clock: LinkClock,
        sock: socket.socket,
        peer: str,
        keys: tuple[bytes, bytes] | None,
        *,
        pending: bytes = b"",
        greeting: bytes = b"",
        long_lines: bool = False,
    ) -> None:
        """``keys``: this side's sending and receiving keys (``handshake.session_keys``); ``pending``: what the
        handshake read past its last line; ``greeting``: the handshake's last line, sent first, unsealed;
        ``long_lines``: every line the peer sends but its heartbeats is longer than one (JSON events): its lone
        heartbeats may wait to be read two at a time."""
        self.clock = clock
        self.loop = clock.loop
        self.sock = sock
        self.peer = peer
        self._out_seal = Sealer(keys[0]) if keys else None
        self._in_seal = Sealer(keys[1]) if keys else None
        self._limit = MAX_LINE + (TAG if keys else 0)
        self.on_line: Callable[[LoopLink, bytes], object] = _ignore  # each line's payload, heartbeats left out
        self.on_end: Callable[[LoopLink], object] = _ignore
        self.why = ""  # how it ended: as Link.why, and "stalled": it did not read what it was sent
        self.detail = ""
        self.closed = False
        self.slot = 0
        self.last_heard = self.last_sent = time.monotonic()
        self._buf = pending
        self._out = bytearray(greeting)
        self._writing = False
        self._finishing = False  # shut our side once everything is written (``finish``)
        self._lowat = long_lines and _LOWAT > 0 and keys is not None

    def start(self) -> None:
        """Serve it from now on (the loop's thread)."""
        self.sock.setblocking(False)
        if self._lowat:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, _LOWAT)
            except OSError:
                self._lowat = False
        self.loop.watch(self.sock, self)
        self.clock.add(self)
        if self._out:
            self._flush()
        if self._buf and not self.closed:
            self._lines(b"")

    # ---- sending ----------------------------------------------------------------------------------------------
    def send(self, obj: dict[str, Any]) -> bool:
        return self.send_raw(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def send_raw(self, data: bytes) -> bool:
        """Whole lines, each sealed; False once the link has ended."""
        if self.closed:
            return False
        if self._out_seal is not None:
            seal = self._out_seal.seal
            one = data.find(b"\n") == len(data) - 1
            data = seal(data[:-1]) if one else b"".join(map(seal, data.split(b"\n")[:-1]))
        return self._write(data, time.monotonic())

    def beat(self, now: float) -> None:
        """A heartbeat (``now``: the caller's clock)."""
        if not self.closed:
            self._write(_HB if self._out_seal is None else self._out_seal.seal(_HB_PAYLOAD), now)

    def _write(self, data: bytes, now: float) -> bool:
        self.last_sent = now
        if self._out:
            self._out += data
            if len(self._out) > MAX_OUT:
                self.end("stalled")
                return False
            return True
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.end("dropped")
            return False
        if sent < len(data):
            self._out += data[sent:]
            self._want_write(True)
        return True

    def post(self, data: bytes) -> None:
        """``send_raw`` from any thread."""
        self.loop.call_soon(self.send_raw, data)

    def finish(self) -> None:
        """Shut our side once everything is written (the peer then reads to the end and closes; ``on_end`` follows)."""
        if self.closed:
            return
        self._finishing = True
        if not self._out:
            self._shut_write()

    def _want_write(self, on: bool) -> None:
        if on != self._writing and not self.closed:
            self._writing = on
            self.loop.interest(self.sock, self, READ | WRITE if on else READ)

    def on_writable(self) -> None:
        if not self.closed:
            self._flush()

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self._out)
        except BlockingIOError:
            sent = 0
        except OSError:
            self.end("dropped")
            return
        del self._out[:sent]
        self._want_write(bool(self._out))
        if not self._out and self._finishing:
            self._shut_write()

    def _shut_write(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    # ---- reading ----------------------------------------------------------------------------------------------
    def on_readable(self) -> None:
        if self.closed:
            return
        try:
            chunk = self.sock.recv(_READ_SIZE)
        except OSError as exc:
            if exc.errno in _AGAIN:
                return
            self.end("dropped")
            return
        if not chunk:
            self.end("closed" if self._finishing else "dropped")
            return
        self.last_heard = time.monotonic()
        self._lines(chunk)

    def catch_up(self) -> None:
        """Read what waits unread (a loop behind its sockets, or a lone heartbeat under the low-water mark): it is no
        silence. The link was last heard when the kernel took in its last bytes, not when they were read."""
        before = self.last_heard
        self.on_readable()
        if self.closed or self.last_heard == before:
            return
        age = _since_last_data(self.sock)
        if age is not None:
            self.last_heard = max(before, min(self.last_heard, time.monotonic() - age))

    def _lines(self, chunk: bytes) -> None:
        buf = self._buf + chunk if self._buf else chunk
        opener = self._in_seal.open if self._in_seal is not None else None
        start = 0
        cut = buf.find(b"\n")
        while cut >= 0:
            if cut - start > self._limit:  # whether or not its newline came in the same read
                self.end("oversized")
                return
            raw = buf[start:cut]
            payload = raw if opener is None else opener(raw)
            if payload is None:
                self.end("forged")
                return
            if payload != _HB_PAYLOAD:
                self.on_line(self, payload)
                if self.closed:
                    return
            start = cut + 1
            cut = buf.find(b"\n", start)
        self._buf = buf[start:] if start < len(buf) else b""
        if len(self._buf) > self._limit:
            self.end("oversized")

    # ---- the end ----------------------------------------------------------------------------------------------
    def end(self, why: str, detail: str = "") -> None:
        """End the link (``why``: as ``Link.why``); ``on_end`` is told once."""
        if self.closed:
            return
        self.closed = True
        self.why, self.detail = why, detail
        self.loop.forget(self.sock)
        self.clock.remove(self)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._out = bytearray()
        self.on_end(self)

    def close(self) -> None:
        self.end("closed")

    def refuse(self, detail: str) -> None:
        """End the link for a malformed message (``detail``: what was wrong)."""
        self.end("malformed", detail)
