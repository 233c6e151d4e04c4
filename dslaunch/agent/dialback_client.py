"""The way back to its launcher for an agent that pdsh or mpirun started (``--for-job --dial-file PATH``, or a
one-attempt agent's liveness line).

pdsh gives an agent no stdin, so the launcher listens on a port and each of its agents dials back, to the address
the host's sshd saw the launcher come from (``SSH_CONNECTION``, or ``DSLAUNCH_DIAL_ADDR`` when the launcher is
reached otherwise), with the job's dial-back secret (a staged 0600 file, read and deleted here; under mpirun a
variable, ``mpi_env.DIAL_VAR``). It dials as a pod joins its coordinator (``channel/dial.py``): its ``hello``
first, the launcher's challenge, its answer (its node rank and name), the launcher's welcome; tried again within
its bound while the launcher cannot be reached. The connection is then a ``channel.link.Link``, the agent's
control channel as stdin is over ssh: attempts, stops, signals, every line MACed (an altered, replayed or injected
line ends it), heartbeats both ways. Its end (the job's end, the launcher's death) or its silence ends the agent.
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
from dslaunch.channel.dial import dial
from dslaunch.channel.link import SILENT, Link

ADDR_VAR = "DSLAUNCH_DIAL_ADDR"
DIALBACK_TIMEOUT = 10.0  # a job agent's tries to reach its launcher: it has nothing to do before
WATCH_TIMEOUT = 5.0  # a one-attempt agent's liveness line: its ranks run meanwhile
MAX_PLAN_LINE = 64 << 20  # a line from the launcher: a ``run`` line carries the whole plan (200 KB at 1,024 nodes)
NAMES = ("the launcher", "this agent")  # in a refusal's words


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


def dial_back(path: str, run_id: str, environ: Mapping[str, str]) -> tuple[Link, str]:
    """The authenticated link to the launcher, and this host's name in the plan. Raises ``DialBackError`` (or
    ``wire.WireError`` for the file) with what went wrong."""
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
    text: str, run_id: str, environ: Mapping[str, str], timeout: float, *, name: str | None = None, node_rank: int = -1
) -> tuple[Link, str]:
    """``dial_back``'s link, from the ``dialback_text`` line itself, tried again within ``timeout`` while the
    launcher cannot be reached (``channel/dial.py``); ``name``: the one this agent gives the launcher instead of the
    line's host (under mpirun every agent gets the same line); ``node_rank``: this agent's (-1: a job agent's,
    which takes any)."""
    port, secret, host = parse_dialback(text)
    host = name or host
    address = launcher_address(environ)
    _check_resolves(address, port)
    who = (secret, run_id, (node_rank, host, -1), None)
    got = dial([(address, port)], who, time.monotonic() + timeout, names=NAMES, max_line=MAX_PLAN_LINE)
    if isinstance(got, Link):
        return got, host
    if got.kind == "refused":
        raise DialBackError(got.why)
    if got.kind == "no handshake":
        raise DialBackError(f"{address} port {port} did not answer as a dslaunch launcher")
    raise DialBackError(f"cannot reach the launcher at {address} port {port}: {got.why or 'no time left to try'}")


def _check_resolves(address: str, port: int) -> None:
    """A launcher's name that does not resolve here will not later (it listens before its agents start): said at
    once, not tried again, so an agent under mpirun decides a stop's step alone before mpirun's SIGKILL. (A name
    server that does not answer now may later: ``dial`` tries again.)"""
    try:
        socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno != socket.EAI_AGAIN:
            raise DialBackError(f"cannot reach the launcher at {address} port {port}: {exc.strerror}") from None


def forward_lines(link: Link, forward: int | None) -> None:
    """The launcher's lines, as they come, written to ``forward`` (closed at the end), until the link ends: the
    job's end or the launcher's, its silence (``channel/link.SILENT``: a partition, a launcher that hangs), or a
    line that fails its MAC (altered, replayed or injected on the way), which is said here."""
    link.start_heartbeats()
    try:
        for line in link.lines():
            if forward is not None and not _write_all(forward, line.encode()):
                break
    finally:
        link.close()
        if link.why in _SAID:  # before the EOF below: the agent may exit at once then
            print(f"dslaunch agent: the launcher's connection ended: {_SAID[link.why]}", file=sys.stderr, flush=True)
        if forward is not None:
            os.close(forward)


_SAID = {
    "silent": f"nothing from it for {SILENT:g} s",
    "forged": "a line failed its MAC (altered, replayed or injected on the way?)",
    "oversized": "a line over the size limit",
}


def _write_all(fd: int, data: bytes) -> bool:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:  # the agent closed its end: it is ending
        return False
    return True


def watch_launcher(
    text: str,
    run_id: str,
    environ: Mapping[str, str],
    forward: int | None = None,
    *,
    name: str | None = None,
    node_rank: int = -1,
) -> None:
    """A one-attempt agent's liveness line to its launcher (pdsh's, mpirun's), in the background: once it is up, its
    end (the launcher's death, its silence, a line that fails its MAC) is SIGHUP to this agent, which tears its node
    down as for any stop signal. What the launcher sends on it (``stop``, the job's stop step) is written to
    ``forward`` (the agent's side control pipe, ``NodeLoop.watch_side``). Its stops' signals and output still go
    through pdsh or mpirun; a launcher it cannot reach within ``WATCH_TIMEOUT`` is said once and ``forward`` is
    closed (this node then decides a stop's step alone), and only the host's sshd can tell this agent of a
    partition (docs/teardown.md)."""

    def watch() -> None:
        try:
            link, _host = connect_back(text, run_id, environ, WATCH_TIMEOUT, name=name, node_rank=node_rank)
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
        forward_lines(link, forward)
        os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
