"""The launcher's port for the agents that dial back to it (agent/dialback_client.py): pdsh's job agents and
one-attempt agents, and the agents mpirun starts. Each proves with the job's dial-back secret (channel/handshake.py)
that it is one of the job's agents before its connection is kept, by the name it gave; a flood of connections that
prove nothing costs no threads beyond ``MAX_GREETING``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence

from dslaunch.channel import handshake
from dslaunch.channel.line_reader import read_handshake_line
from dslaunch.oslib.tcp import keep_alive

GREET_WAIT = 10.0  # how long a connection may take to prove it is one of the job's agents
MAX_GREETING = 512  # connections proving themselves at once; more are closed at once (a flood costs no threads)


class DialBackListener:
    """The launcher's port for its agents: accepts, checks each one's proof, and keeps the connections by host."""

    def __init__(self, run_id: str, secret: bytes) -> None:
        self.run_id = run_id
        self.secret = secret
        if socket.has_dualstack_ipv6():
            self.sock = socket.create_server(("", 0), family=socket.AF_INET6, dualstack_ipv6=True)
        else:
            self.sock = socket.create_server(("0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self._joined: dict[str, tuple[socket.socket, bytes]] = {}
        self._cond = threading.Condition()
        self._greeting = threading.BoundedSemaphore(MAX_GREETING)
        threading.Thread(target=self._accept, name="dial-back", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if not self._greeting.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._greet_one, args=(conn,), daemon=True).start()

    def _greet_one(self, conn: socket.socket) -> None:
        try:
            self._greet(conn)
        finally:
            self._greeting.release()

    def _greet(self, conn: socket.socket) -> None:
        server_nonce = handshake.nonce()
        deadline = time.monotonic() + GREET_WAIT
        try:
            conn.sendall(handshake.challenge(server_nonce))
            got = read_handshake_line(conn, handshake.MAX_LINE, deadline)
            joiner = handshake.check_answer(self.secret, self.run_id, server_nonce, got[0]) if got else None
            if joiner is None or got is None:
                conn.close()  # not one of this job's agents
                return
            conn.sendall(handshake.welcome(self.secret, self.run_id, server_nonce, joiner.nonce))
            keep_alive(conn)
            conn.settimeout(None)
        except OSError:
            conn.close()
            return
        with self._cond:
            old = self._joined.pop(joiner.host, None)
            self._joined[joiner.host] = (conn, got[1])
            self._cond.notify_all()
        if old is not None:
            old[0].close()

    def joined(self, host: str) -> bool:
        with self._cond:
            return host in self._joined

    def send(self, host: str, data: bytes) -> bool:
        """Whole lines to ``host``'s one-attempt agent on the connection it keeps
        (agent/dialback_client.py::watch_launcher); False when it has none."""
        with self._cond:
            joined = self._joined.get(host)
        if joined is None:
            return False
        try:
            joined[0].sendall(data)
        except OSError:
            return False
        return True

    def take(self, hosts: Sequence[str], deadline: float, gone: Callable[[str], bool]) -> dict[str, socket.socket]:
        """The connections of ``hosts``' agents as they dial back, until each has, or its ssh ended (``gone``), or
        ``deadline`` (monotonic)."""
        taken: dict[str, socket.socket] = {}
        with self._cond:
            while True:
                for host in hosts:
                    if host not in taken and host in self._joined:
                        taken[host] = self._joined.pop(host)[0]
                waiting = [h for h in hosts if h not in taken and not gone(h)]
                left = deadline - time.monotonic()
                if not waiting or left <= 0:
                    return taken
                self._cond.wait(min(left, 0.1))

    def close(self) -> None:
        self.sock.close()
        with self._cond:
            for conn, _ in self._joined.values():
                conn.close()
            self._joined = {}
