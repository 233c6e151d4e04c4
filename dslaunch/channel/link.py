"""One authenticated connection between two pods' launchers: whole JSON lines both ways, heartbeats, and how
it ended.

Each side sends a heartbeat when it has sent nothing else for ``HEARTBEAT`` seconds, and any line it hears counts as
one: a side that hears nothing for ``SILENT`` seconds takes the other as lost (a powered-off pod or a partition sends
no reset). A line longer than ``MAX_LINE`` bytes (its newline and its MAC not counted) ends the connection, whether
its newline came in the same read or not: memory per connection stays bounded whatever the other side sends. What a
line says is checked by its reader (``pods/messages.py``), which ends the link for a malformed one (``refuse``). With
keys from the handshake every line, heartbeats included, carries a MAC over its sequence number (:class:`Sealer`): a
line that fails it ends the connection ("forged").
"""

from __future__ import annotations

import hmac
import json
import queue
import socket
import threading
import time
from collections.abc import Iterator
from hashlib import sha256
from typing import Any

HEARTBEAT = 1.0
SILENT = 4.0  # detection of a silent loss within 5 s (docs/kubernetes.md)
BEAT_SHARE = 4096  # a server's heartbeats a second at most: past as many links, its beats slow down in proportion
MAX_LINE = 64 * 1024  # the agents cut rank output at 64 KiB, and events are smaller
_HB = b'{"t":"hb"}\n'
TAG = 33  # a tab and 32 hex digits: each line's MAC, with keys


def server_beat(peers: int) -> float:
    """How often a server with ``peers`` links sends a heartbeat on an idle one: every ``HEARTBEAT`` up to
    ``BEAT_SHARE`` links, then slower in proportion, so that it sends at most ``BEAT_SHARE`` a second (each is a
    sealed send, a system call and, on loopback, the receiving socket's TCP work: at 16,384 pods they were most of a
    quiet coordinator's CPU, docs/scale.md). Its peers still beat every ``HEARTBEAT``, and it still takes
    ``SILENT`` of a peer's silence as a loss."""
    return HEARTBEAT * max(1.0, peers / BEAT_SHARE)


def server_silent(peers: int) -> float:
    """How long the peers of a server with ``peers`` links wait for a line from it: as many of its beats as
    ``SILENT`` is of ``HEARTBEAT`` (4 s up to 4,096 peers, 16 s at 16,384)."""
    return SILENT * server_beat(peers) / HEARTBEAT


class Sealer:
    """One direction's MACs (HMAC-SHA256 under a key the handshake derived, ``handshake.session_keys``), over a
    sequence number that counts that direction's lines: a line altered, injected, replayed, reordered or dropped
    fails the next check."""

    def __init__(self, key: bytes) -> None:
        outer = hmac.new(key, digestmod=sha256)  # copied per line: the key's pads are computed once
        self._key = getattr(outer, "_hmac", outer)  # OpenSSL's own where there is one: its copy is one C call
        self.seq = 0

    def _tag(self, payload: bytes) -> bytes:
        mac = self._key.copy()
        mac.update(self.seq.to_bytes(8, "big"))
        mac.update(payload)
        self.seq += 1
        return mac.hexdigest()[:32].encode()

    def seal(self, payload: bytes) -> bytes:
        return payload + b"\t" + self._tag(payload) + b"\n"

    def open(self, line: bytes) -> bytes | None:
        """The payload of a sealed line, or None if its MAC is not the next one's."""
        payload, tab, tag = line.rpartition(b"\t")
        if not tab or not hmac.compare_digest(self._tag(payload), tag):
            return None
        return payload


class Link:
    def __init__(
        self,
        sock: socket.socket,
        peer: str,
        pending: bytes = b"",
        keys: tuple[bytes, bytes] | None = None,
        max_line: int = MAX_LINE,
    ) -> None:
        """``pending``: what the handshake read past its last line; ``keys``: this side's sending and receiving
        keys (``handshake.session_keys``), every line MACed both ways; None: lines as they are. ``max_line``: the
        longest line the other side may send (a job agent's ``run`` line carries the whole plan)."""
        self.sock = sock
        self.max_line = max_line
        self.peer = peer
        self._out: Sealer | None = Sealer(keys[0]) if keys else None
        self._in: Sealer | None = Sealer(keys[1]) if keys else None
        self.why = ""  # how it ended: "closed", "dropped", "silent", "oversized", "malformed", "forged"
        self.detail = ""  # with "malformed": what was wrong (pods/messages.py)
        self._send_lock = threading.Lock()
        self._end_lock = threading.Lock()
        self._closed = threading.Event()
        self._buf = pending
        self.last_sent = time.monotonic()
        self.silence = SILENT  # how long the other side may say nothing (``allow_silence``)
        sock.settimeout(SILENT)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def send(self, obj: dict[str, Any]) -> bool:
        return self.send_raw(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    def send_raw(self, data: bytes) -> bool:
        """Send whole lines; False once the connection is gone (a send that blocks ``SILENT`` seconds ends it)."""
        if self._closed.is_set():
            return False
        try:
            with self._send_lock:  # sealed under the lock: the sequence numbers go out in order
                if self._out is not None:
                    data = b"".join(self._out.seal(line) for line in data.split(b"\n")[:-1])
                self.sock.sendall(data)
                self.last_sent = time.monotonic()
            return True
        except TimeoutError:
            self._end("silent")
        except OSError:
            self._end("dropped")
        return False

    def lines(self) -> Iterator[str]:
        """Every line the other side sends, heartbeats left out, until the connection ends (``why`` says how)."""
        limit = self.max_line + (TAG if self._in is not None else 0)
        while True:
            cut = self._buf.find(b"\n")
            while cut >= 0:
                raw, self._buf = self._buf[:cut], self._buf[cut + 1 :]
                if len(raw) > limit:  # whether or not its newline came in the same read
                    self._end("oversized")
                    return
                payload = raw if self._in is None else self._in.open(raw)
                if payload is None:
                    self._end("forged")
                    return
                if payload != _HB[:-1]:
                    yield payload.decode("utf-8", "replace") + "\n"
                cut = self._buf.find(b"\n")
            if len(self._buf) > limit:
                self._end("oversized")
                return
            try:
                chunk = self.sock.recv(MAX_LINE)
            except TimeoutError:
                self._end("silent")
                return
            except OSError:
                self._end("closed" if self._closed.is_set() else "dropped")
                return
            if not chunk:
                self._end("closed" if self._closed.is_set() else "dropped")
                return
            self._buf += chunk

    def start_reader(self) -> None:
        """Read on a thread of its own from now on (``received``): a waiting pod's silence is noticed too."""
        self._inbox: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._read, name=f"reader {self.peer}", daemon=True).start()

    def received(self) -> Iterator[str]:
        """With ``start_reader``: the lines read, until the connection ends."""
        while (line := self._inbox.get()) is not None:
            yield line

    def _read(self) -> None:
        for line in self.lines():
            self._inbox.put(line)
        self._inbox.put(None)

    def start_heartbeats(self) -> None:
        threading.Thread(target=self._beat, name=f"heartbeat {self.peer}", daemon=True).start()

    def close(self) -> None:
        self._end("closed")

    def refuse(self, detail: str) -> None:
        """End the link for a malformed message (``detail``: what was wrong)."""
        if not self._closed.is_set():
            self.detail = detail
        self._end("malformed")

    def allow_silence(self, seconds: float) -> None:
        """Wait ``seconds``, not ``SILENT``, for the other side's next line (``server_silent``: a server with many
        peers beats less often)."""
        self.silence = seconds
        self.sock.settimeout(seconds)

    def wait_closed(self, timeout: float) -> bool:
        return self._closed.wait(timeout)

    def _beat(self) -> None:
        """A heartbeat whenever nothing else was sent for ``HEARTBEAT`` seconds."""
        wait = HEARTBEAT
        while not self._closed.wait(wait):
            idle = time.monotonic() - self.last_sent
            if idle >= HEARTBEAT * 0.95:
                self.send_raw(_HB)
                wait = HEARTBEAT
            else:
                wait = HEARTBEAT - idle

    def _end(self, why: str) -> None:
        with self._end_lock:
            if self._closed.is_set():
                return
            self.why = why
            self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
