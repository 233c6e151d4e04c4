"""The way back to its launcher for an agent that pdsh started (``--for-job --dial-file PATH``).

pdsh gives an agent no stdin, so the launcher listens on a port and each of its agents dials back, to the address
the host's sshd saw the launcher come from (``SSH_CONNECTION``, or ``DSLAUNCH_DIAL_ADDR`` when the launcher is
reached otherwise), and proves with the job's dial-back secret (a staged 0600 file, read and deleted here) that it
is one of the job's agents, as the pods of a job prove it to their coordinator (channel/handshake.py). That
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
from dslaunch.channel import handshake
from dslaunch.channel.line_reader import read_handshake_line
from dslaunch.oslib.tcp import keep_alive

ADDR_VAR = "DSLAUNCH_DIAL_ADDR"
DIALBACK_TIMEOUT = 10.0
WATCH_TIMEOUT = 5.0  # a one-attempt agent's liveness line: its ranks run meanwhile


# One line in a staged 0600 file: the launcher's port, the job's dial-back secret (hex) and the host's name in the
# plan, by which the launcher knows the agent; the address is the one the host's sshd saw the launcher come from.
DIALBACK_WORD = "dslaunch-dial"


def dialback_text(port: int, secret: bytes, host: str) -> str:
    return f"{DIALBACK_WORD} {port} {secret.hex()} {host}\n"


def parse_dialback(text: str) -> tuple[int, bytes, str]:
    """(port, secret, host) from ``dialback_text``; raises ``WireError`` for anything else."""
    words = text.split()
    if len(words) == 4 and words[0] == DIALBACK_WORD and words[1].isascii() and words[1].isdigit():
        port = int(words[1])
        try:
            secret = bytes.fromhex(words[2])
        except ValueError:
            secret = b""
        if 0 < port < 65536 and 16 <= len(secret) <= 1024 and len(words[3]) <= 253:
            return port, secret, words[3]
    raise wire.WireError("the dial-back file does not hold a port, a secret and a host name")


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
    text: str, run_id: str, environ: Mapping[str, str], timeout: float, name: str | None = None
) -> tuple[socket.socket, bytes, str]:
    """``dial``'s connection, from the ``dialback_text`` line itself; ``name``: the one this agent gives the
    launcher instead of the line's host (under mpirun every agent gets the same line)."""
    port, secret, host = parse_dialback(text)
    host = name or host
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


def watch_launcher(
    text: str, run_id: str, environ: Mapping[str, str], forward: int | None = None, name: str | None = None
) -> None:
    """A one-attempt agent's liveness line to its launcher (pdsh's, mpirun's), in the background: once it is up, its
    end (the launcher's death, a partition found by keepalive) is SIGHUP to this agent, which tears its node down as
    for any stop signal. What the launcher sends on it (``stop``, the job's stop step) is written to ``forward`` (the
    agent's side control pipe, ``NodeLoop.watch_side``). Its stops' signals and output still go through pdsh or
    mpirun; a launcher it cannot reach is said once and ``forward`` is closed (this node then decides a stop's step
    alone), and only the host's sshd can tell this agent of a partition (docs/teardown.md)."""

    def watch() -> None:
        try:
            sock, _pending, _host = connect_back(text, run_id, environ, WATCH_TIMEOUT, name)
        except (DialBackError, wire.WireError) as exc:
            print(
                f"dslaunch agent: warning: {exc}; a partition will not be noticed here, and a stop's step is this "
                "node's alone",
                file=sys.stderr,
                flush=True,
            )
            if forward is not None:
                os.close(forward)
            return
        with sock:
            try:
                while data := sock.recv(4096):
                    if forward is not None:
                        os.write(forward, data)
            except OSError:
                pass
        os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
