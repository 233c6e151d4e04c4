"""A man in the middle on loopback for the dial-back's tests: it forwards each connection to the launcher's port and
can change what the launcher sends, line by line, as whoever can inject into that TCP stream could."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

# (the launcher's line, its number on this connection from 0: the challenge, the welcome, then the link's) -> the
# lines sent on in its place
Tamper = Callable[[bytes, int], list[bytes]]


class Relay:
    def __init__(self, target_port: int, port: int = 0, tamper: Tamper | None = None) -> None:
        """Listens on ``port`` of 127.0.0.1 (0: any free one) and forwards to ``target_port`` there."""
        self.target_port = target_port
        self.tamper = tamper
        self.server = socket.create_server(("127.0.0.1", port))
        self.port: int = self.server.getsockname()[1]
        self.connections = 0
        self._socks: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            try:
                up = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                down.close()
                continue
            up.settimeout(None)
            self._socks += [down, up]
            threading.Thread(target=self._pump, args=(down, up), daemon=True).start()  # the agent's: as they are
            threading.Thread(target=self._lines, args=(up, down), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        _close(src, dst)

    def _lines(self, src: socket.socket, dst: socket.socket) -> None:
        buf, n = b"", 0
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    out = self.tamper(line + b"\n", n) if self.tamper else [line + b"\n"]
                    n += 1
                    dst.sendall(b"".join(out))
        _close(src, dst)

    def close(self) -> None:
        for sock in self._socks:
            _close(sock)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
