"""Simulated pods for the tests: many in one thread, each a raw socket speaking the real handshake (hello,
challenge, answer, welcome) and then sealed lines, so the coordinator's side is measured alone."""

from __future__ import annotations

import socket
import time

from dslaunch.channel import handshake
from dslaunch.channel.link import Sealer


class SimPod:
    def __init__(self, key: bytes, run_id: str, node_rank: int) -> None:
        self.key, self.run_id, self.node_rank = key, run_id, node_rank
        self.sock: socket.socket | None = None
        self.client_nonce = handshake.nonce()
        self.server_nonce = ""
        self.buf = b""
        self.out: Sealer | None = None
        self.into: Sealer | None = None

    def connect(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def hello(self) -> None:
        assert self.sock is not None
        self.sock.sendall(handshake.hello(self.key, self.run_id, self.client_nonce))

    def line(self, deadline: float) -> bytes | None:
        """The next line from the coordinator (raw), None at the connection's end or the deadline."""
        assert self.sock is not None
        while b"\n" not in self.buf:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def answer(self, deadline: float) -> bool:
        """Take the challenge and answer it; False if none came."""
        assert self.sock is not None
        got = self.line(deadline)
        self.server_nonce = handshake.read_challenge(got) or "" if got else ""
        if not self.server_nonce:
            return False
        me = (self.node_rank, f"pod-{self.node_rank}", -1)
        self.sock.sendall(handshake.answer(self.key, self.run_id, me, self.server_nonce, self.client_nonce))
        return True

    def welcomed(self, deadline: float) -> bool:
        got = self.line(deadline)
        if got is None or not handshake.check_welcome(self.key, self.run_id, self.server_nonce, self.client_nonce, got):
            return False
        to_pod, to_coordinator = handshake.session_keys(self.key, self.run_id, self.server_nonce, self.client_nonce)
        self.out, self.into = Sealer(to_coordinator), Sealer(to_pod)
        return True

    def join(self, port: int, deadline: float) -> bool:
        self.connect(port)
        self.hello()
        return self.answer(deadline) and self.welcomed(deadline)

    def send(self, payload: bytes) -> None:
        assert self.sock is not None and self.out is not None
        self.sock.sendall(self.out.seal(payload))

    def message(self, deadline: float) -> bytes | None:
        """The next sealed message's payload, heartbeats left out; None at the end, the deadline or a bad MAC."""
        assert self.into is not None
        while (raw := self.line(deadline)) is not None:
            payload = self.into.open(raw)
            if payload != b'{"t":"hb"}':
                return payload
        return None

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
