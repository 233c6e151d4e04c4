"""The way back to its launcher for an agent that pdsh started (``--for-job --dial-file PATH``).

pdsh gives an agent no stdin, so the launcher listens on a port and each of its agents dials back, to the address
the host's sshd saw the launcher come from (``SSH_CONNECTION``, or ``DSLAUNCH_DIAL_ADDR`` when the launcher is
reached otherwise), and proves with the job's dial-back secret (a staged 0600 file, read and deleted here) that it
is one of the job's agents, as the pods of a job prove it to their coordinator (auth/handshake.py). That
connection is then the agent's control channel, as stdin is over ssh: attempts, stops, signals; its EOF (the job's
end, the launcher's death) or its silence (TCP keepalive, ``oslib/tcp.DEAD_AFTER``) ends the agent.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping

from dslaunch import wire
from dslaunch.auth import handshake
from dslaunch.auth.line_reader import read_handshake_line
from dslaunch.oslib.tcp import keep_alive

ADDR_VAR = "DSLAUNCH_DIAL_ADDR"
DIALBACK_TIMEOUT = 10.0
WATCH_TIMEOUT = 5.0  # a one-attempt agent's liveness line: its ranks run meanwhile


class DialBackError(Exception):
    pass


def launcher_address(environ: Mapping[str, str]) -> str:
    given = environ.get(ADDR_VAR, "").strip()
    if given:
        return given
    words = environ.get("SSH_CONNECTION", "").split()
    if not words:
        raise DialBackError(f"no SSH_CONNECTION to find the launcher by: set {ADDR_VAR} to its address")
    return words[0]


def dial_back(path: str, run_id: str, environ: Mapping[str, str]) -> tuple[socket.socket, bytes, str]:
    """The authenticated connection to the launcher, what came after the handshake, and this host's name in the
    plan. Raises ``DialBackError`` (or ``wire.WireError`` for the file) with what went wrong."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise DialBackError(f"cannot read the dial-back file {path}: {exc}") from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    return connect_back(text, run_id, environ, DIALBACK_TIMEOUT)


def connect_back(
    text: str, run_id: str, environ: Mapping[str, str], timeout: float
) -> tuple[socket.socket, bytes, str]:
    """``dial``'s connection, from the ``wire.dialback_text`` line itself."""
    port, secret, host = wire.parse_dialback(text)
    address = launcher_address(environ)
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
    except OSError as exc:
        raise DialBackError(f"cannot reach the launcher at {address} port {port}: {exc.strerror or exc}") from None
    try:
        pending = _handshake(sock, secret, run_id, host, deadline)
    except BaseException:
        sock.close()
        raise
    keep_alive(sock)
    sock.settimeout(None)
    return sock, pending, host


def _handshake(sock: socket.socket, key: bytes, run_id: str, host: str, deadline: float) -> bytes:
    got = read_handshake_line(sock, handshake.MAX_LINE, deadline)
    server_nonce = handshake.read_challenge(got[0]) if got else None
    if server_nonce is None:
        raise DialBackError("the launcher's port did not answer as a dslaunch launcher")
    client_nonce = handshake.nonce()
    sock.sendall(handshake.answer(key, run_id, (-1, host, -1), server_nonce, client_nonce))
    got = read_handshake_line(sock, handshake.MAX_LINE, deadline)
    if got is None or not handshake.check_welcome(key, run_id, server_nonce, client_nonce, got[0]):
        raise DialBackError("the launcher did not accept this agent, or could not prove it holds the job's secret")
    return got[1]


def watch_launcher(text: str, run_id: str, environ: Mapping[str, str]) -> None:
    """A one-attempt pdsh agent's liveness line to its launcher, in the background: once it is up, its end (the
    launcher's death, a partition found by keepalive) is SIGHUP to this agent, which tears its node down as for any
    stop signal. Its stops and output still go through pdsh; a launcher it cannot reach is said once, and then only
    the host's sshd can tell this agent of a partition (docs/teardown.md)."""

    def watch() -> None:
        try:
            sock, _pending, _host = connect_back(text, run_id, environ, WATCH_TIMEOUT)
        except (DialBackError, wire.WireError) as exc:
            print(f"dslaunch agent: warning: {exc}; a partition will not be noticed here", file=sys.stderr, flush=True)
            return
        with sock:
            try:
                while sock.recv(4096):
                    pass
            except OSError:
                pass
        os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
