"""The coordinator's door: who gets as far as the handshake, and at what cost (one thread for every connection).

A pod proves it holds the job's key in its first line (``handshake.hello``), sent as soon as it connects; only then
does the coordinator spend anything on it (a nonce, a challenge, room among the few connections that are
answering one). Until then a connection is *pending*: at most ``MAX_PENDING`` are, and a new connection past that
drops the oldest pending one instead of being turned away. So a flood of clients without the secret, however they
reconnect, never keeps a real pod out: the pod's hello is read as soon as its connection is accepted, and a flood
can only push out connections that have not sent one. A wrong hello is told why (``refused``) and dropped; a
hello's nonce seen before (a replay) is dropped. A handshake must end within ``HANDSHAKE_TIME`` of the connection;
lines are bounded (``handshake.MAX_LINE``) so memory per connection is too.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from dslaunch.channel import handshake

MAX_PENDING = 256  # connections that have sent no valid hello yet; a new one past this drops the oldest
MAX_PROVEN = 64  # connections that sent a valid hello and owe the answer to their challenge
HANDSHAKE_TIME = 5.0  # from the connection to the answer
_ACCEPTS = 64  # at most this many accepts per turn, so reads are never starved
_NONCES = 4096  # hello nonces remembered against replays
_NO_SECRET = handshake.line({"t": "refused", "why": "this pod does not hold the job's secret (or has another run id)"})

# (connection, the pod as its answer proved it, the server's nonce, what came after its answer)
Admit = Callable[[socket.socket, handshake.Joiner, str, bytes], None]


@dataclass
class _Caller:
    sock: socket.socket
    since: float
    buf: bytes = b""
    client_nonce: str | None = None  # once its hello checked out
    server_nonce: str = ""


class Door:
    def __init__(self, key: bytes, run_id: str, admit: Admit) -> None:
        self.key = key
        self.run_id = run_id
        self.admit = admit
        self.turned_away = 0  # connections dropped: no or a wrong hello, a wrong answer, too slow, pushed out
        self._pending: OrderedDict[int, _Caller] = OrderedDict()
        self._proven: OrderedDict[int, _Caller] = OrderedDict()
        self._nonces: OrderedDict[str, None] = OrderedDict()
        self._closed = threading.Event()
        self._sel = selectors.DefaultSelector()
        self._server: socket.socket | None = None

    def open(self, server: socket.socket) -> None:
        server.setblocking(False)
        self._server = server
        self._sel.register(server, selectors.EVENT_READ)
        threading.Thread(target=self._serve, name="pods door", daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        if self._server is not None:
            self._server.close()

    def _serve(self) -> None:
        try:
            while not self._closed.is_set():
                for key, _ in self._sel.select(0.1):
                    if key.fileobj is self._server:
                        self._accept()
                    elif isinstance(key.data, _Caller):
                        self._read(key.data)
                self._expire(time.monotonic())
        finally:
            for caller in [*self._pending.values(), *self._proven.values()]:
                caller.sock.close()
            self._sel.close()

    def _accept(self) -> None:
        assert self._server is not None  # set before the thread starts
        for _ in range(_ACCEPTS):
            try:
                conn, _addr = self._server.accept()
            except OSError:  # none left (BlockingIOError), or closed
                return
            conn.setblocking(False)
            while len(self._pending) >= MAX_PENDING:  # the oldest that has not proven itself makes room
                self._drop(next(iter(self._pending.values())))
            caller = _Caller(conn, time.monotonic())
            self._pending[conn.fileno()] = caller
            self._sel.register(conn, selectors.EVENT_READ, caller)
            self._read(caller)  # a pod's hello is usually there already

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
        fd = caller.sock.fileno()
        self._pending.pop(fd, None)
        while len(self._proven) >= MAX_PROVEN:
            self._drop(next(iter(self._proven.values())))
        self._proven[fd] = caller
        caller.client_nonce, caller.server_nonce = client_nonce, handshake.nonce()
        self._send(caller, handshake.challenge(caller.server_nonce))

    def _answer(self, caller: _Caller, line: bytes) -> None:
        joiner = handshake.check_answer(self.key, self.run_id, caller.server_nonce, line)
        if joiner is None or joiner.nonce != caller.client_nonce:
            self._drop(caller)
            return
        self._forget(caller)
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

    def _expire(self, now: float) -> None:
        for waiting in (self._pending, self._proven):
            while waiting and now - next(iter(waiting.values())).since > HANDSHAKE_TIME:
                self._drop(next(iter(waiting.values())))

    def _drop(self, caller: _Caller) -> None:
        self.turned_away += 1
        self._forget(caller)
        caller.sock.close()

    def _forget(self, caller: _Caller) -> None:
        fd = caller.sock.fileno()
        self._pending.pop(fd, None)
        self._proven.pop(fd, None)
        try:
            self._sel.unregister(caller.sock)
        except (KeyError, ValueError):
            pass
