"""The door of a control channel's server: who gets as far as the handshake, and at what cost (no thread per
connection: it runs on a :class:`~dslaunch.channel.event_loop.Loop`, its own or its owner's).

A peer proves it holds the job's key in its first line (``handshake.hello``), sent as soon as it connects; only then
does the server spend anything on it (a nonce, a challenge, room among the connections that are answering one). Until
then a connection is *pending*: at most ``MAX_PENDING`` are (and a share of the open-files limit), and a new
connection past that drops the oldest pending one instead of being turned away. (A pod sends its hello with its
connection, so it is pending for a moment at most; a simulator of thousands of pods in one process may take longer.)
So a flood of clients without the secret, however they reconnect, never keeps a real peer out: its hello is read as
soon as its connection is accepted, and a flood can only push out connections that have not sent one. A wrong hello is
told why (``refused``) and dropped; a hello's nonce seen before (a replay) is dropped. Connections that sent a valid
hello and owe their answer (*proven*) are bounded by ``MAX_PROVEN``, sized for a synchronized start of every pod of a
large job: each costs one connection, not several. A handshake must end within ``HANDSHAKE_TIME`` of the connection;
lines are bounded (``handshake.MAX_LINE``) so memory per connection is too.
"""

from __future__ import annotations

import errno
import resource
import socket
import time
from collections import OrderedDict
from collections.abc import Callable

from dslaunch.channel import handshake
from dslaunch.channel.event_loop import Loop

MAX_PENDING = 4096  # connections that have sent no valid hello yet; a new one past this drops the oldest
FD_SHARE = 4  # ... and at most this share of the open-files limit: the rest of the process needs room too
MAX_PROVEN = 32768  # connections that sent a valid hello and owe the answer to their challenge
HANDSHAKE_TIME = 5.0  # from the connection to the answer
SWEEP = 0.1  # how often handshakes past their time are ended
_ACCEPTS = 64  # at most this many accepts per turn, so reads are never starved
_NONCES = 65536  # hello nonces remembered against replays
_NO_ROOM = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_NO_SECRET = handshake.line({"t": "refused", "why": "this pod does not hold the job's secret (or has another run id)"})

# (connection, the peer as its answer proved it, the server's nonce, what came after its answer)
Admit = Callable[[socket.socket, handshake.Joiner, str, bytes], None]


class _Caller:
    __slots__ = ("buf", "client_nonce", "door", "fd", "server_nonce", "since", "sock")

    def __init__(self, door: Door, sock: socket.socket, since: float) -> None:
        self.door, self.sock, self.fd, self.since = door, sock, sock.fileno(), since
        self.buf = b""
        self.client_nonce: str | None = None  # once its hello checked out
        self.server_nonce = ""

    def on_readable(self) -> None:
        self.door._read(self)

    def on_writable(self) -> None:
        return None


class _Listening:
    def __init__(self, door: Door) -> None:
        self.door = door

    def on_readable(self) -> None:
        self.door._accept()

    def on_writable(self) -> None:
        return None


class Door:
    def __init__(self, key: bytes, run_id: str, admit: Admit, *, loop: Loop | None = None, blocking: bool = True):
        """``admit`` is called on the loop's thread with each peer that passed the handshake; ``loop``: the one to
        run on (None: a loop of its own, from ``open`` to ``close``); ``blocking``: the socket is handed over in
        blocking mode (else as the loop keeps it, non-blocking)."""
        self.key = key
        self.run_id = run_id
        self.admit = admit
        self.turned_away = 0  # connections dropped: no or a wrong hello, a wrong answer, too slow, pushed out
        self.tries = 0  # connections accepted
        self._blocking = blocking
        self._own = loop is None
        self._loop = loop if loop is not None else Loop("channel door")
        self._pending: OrderedDict[int, _Caller] = OrderedDict()
        self._proven: OrderedDict[int, _Caller] = OrderedDict()
        self._nonces: OrderedDict[str, None] = OrderedDict()
        self._server: socket.socket | None = None
        self._listening = _Listening(self)
        self._closed = False
        self._fd_room = 1 << 30

    def open(self, server: socket.socket) -> None:
        """Serve ``server`` (a listening socket) from now on."""
        server.setblocking(False)
        self._server = server
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft != resource.RLIM_INFINITY:
            self._fd_room = max(64, soft // FD_SHARE)
        self._loop.call_soon(self._open)
        if self._own:
            self._loop.start()

    def close(self) -> None:
        """Stop accepting and drop the handshakes under way (from any thread)."""
        if self._closed:
            return
        self._closed = True
        if self._loop.running:
            self._loop.call_soon(self._shut)
            if self._own:
                self._loop.stop()
        else:
            self._shut()

    def _open(self) -> None:
        assert self._server is not None
        if not self._closed:
            self._loop.watch(self._server, self._listening)
            self._sweeper = self._loop.call_every(SWEEP, self._expire)

    def _shut(self) -> None:
        if self._server is not None:
            self._loop.forget(self._server)
            self._server.close()
        for caller in [*self._pending.values(), *self._proven.values()]:
            self._forget(caller)
            caller.sock.close()
        sweeper = getattr(self, "_sweeper", None)
        if sweeper is not None:
            sweeper.cancel()

    def _accept(self) -> None:
        assert self._server is not None
        for _ in range(_ACCEPTS):
            try:
                conn, _addr = self._server.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in _NO_ROOM:
                    self._no_room()
                return  # none left, or closed
            self.tries += 1
            conn.setblocking(False)
            while len(self._pending) >= min(MAX_PENDING, self._fd_room):  # the oldest not proven makes room
                self._drop(next(iter(self._pending.values())))
            caller = _Caller(self, conn, time.monotonic())
            self._pending[caller.fd] = caller
            self._loop.watch(conn, caller)
            self._read(caller)  # a peer's hello is usually there already

    def _no_room(self) -> None:
        """Out of file descriptors: the oldest pending connection makes room, or accepting pauses a moment (the
        listening socket would wake the loop again at once)."""
        if self._pending:
            self._drop(next(iter(self._pending.values())))
            return
        assert self._server is not None
        self._loop.forget(self._server)
        self._loop.call_later(SWEEP, self._resume)

    def _resume(self) -> None:
        if not self._closed and self._server is not None:
            self._loop.watch(self._server, self._listening)

    def _read(self, caller: _Caller) -> None:
        try:
            data = caller.sock.recv(handshake.MAX_LINE + 1 - len(caller.buf))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(caller)
            return
        caller.buf += data
        if b"\n" not in caller.buf:
            if len(caller.buf) > handshake.MAX_LINE:
                self._drop(caller)
            return
        line, _, caller.buf = caller.buf.partition(b"\n")
        if caller.client_nonce is None:
            self._hello(caller, line)
        else:
            self._answer(caller, line)

    def _hello(self, caller: _Caller, line: bytes) -> None:
        client_nonce = handshake.check_hello(self.key, self.run_id, line)
        if client_nonce is None or client_nonce in self._nonces:
            self._send(caller, _NO_SECRET if client_nonce is None else b"")
            self._drop(caller)
            return
        self._nonces[client_nonce] = None
        while len(self._nonces) > _NONCES:
            self._nonces.popitem(last=False)
        self._pending.pop(caller.fd, None)
        while len(self._proven) >= MAX_PROVEN:
            self._drop(next(iter(self._proven.values())))
        self._proven[caller.fd] = caller
        caller.client_nonce, caller.server_nonce = client_nonce, handshake.nonce()
        self._send(caller, handshake.challenge(caller.server_nonce))

    def _answer(self, caller: _Caller, line: bytes) -> None:
        joiner = handshake.check_answer(self.key, self.run_id, caller.server_nonce, line)
        if joiner is None or joiner.nonce != caller.client_nonce:
            self._drop(caller)
            return
        self._forget(caller)
        if self._blocking:
            caller.sock.setblocking(True)
        try:
            self.admit(caller.sock, joiner, caller.server_nonce, caller.buf)
        except OSError:
            caller.sock.close()

    def _send(self, caller: _Caller, data: bytes) -> None:
        try:
            caller.sock.send(data)  # a line this short fits a fresh connection's buffer
        except OSError:
            pass

    def _expire(self) -> None:
        now = time.monotonic()
        for waiting in (self._pending, self._proven):
            while waiting and now - (caller := next(iter(waiting.values()))).since > HANDSHAKE_TIME:
                self._read(caller)  # a line waiting unread is the peer on time and the loop behind
                if waiting.get(caller.fd) is caller:
                    self._drop(caller)

    def _drop(self, caller: _Caller) -> None:
        self.turned_away += 1
        self._forget(caller)
        caller.sock.close()

    def _forget(self, caller: _Caller) -> None:
        self._pending.pop(caller.fd, None)
        self._proven.pop(caller.fd, None)
        self._loop.forget(caller.sock)
