"""The client's side of a job's control channel, for every transport: connect, prove the job's secret, check the
server's proof, and retry within the caller's bound; an authenticated :class:`~dslaunch.channel.link.Link` at the
end, or why not.

A pod joining its coordinator (``pods/member.py``), a Slurm task reaching node 0's (``runners/slurm/stop_channel.py``)
and a pdsh or MPI job agent dialling back to its launcher (``agent/dialback_client.py``) all dial here. The first
line is the client's ``hello`` (``channel/door.py`` spends nothing on a connection before it), then the server's
challenge, the client's answer (who it is), and the server's welcome, which proves the server holds the secret too.

A try that fails is tried again until the caller's deadline: the server may not listen yet (its pod, task or
launcher starts later), or a flood pushed this connection out of the door's pending set. The pause between two
tries doubles from ``Backoff.first`` up to ``Backoff.longest``, each a random half to all of it, so thousands of
clients that start at once do not come back in lockstep. Only the server's refusal (another secret, a node rank
it does not take) ends the dial before its deadline: trying again would be refused again (unless another address
may take it).
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from dslaunch.channel import handshake
from dslaunch.channel.line_reader import read_handshake_line
from dslaunch.channel.link import MAX_LINE, Link

CONNECT_TRY = 2.0  # one TCP connect, within the deadline
HANDSHAKE_TIME = 5.0  # one connection's handshake, within the deadline
_SLICE = 0.05  # how often a pause looks at ``stopped``

# The key, the run id, who this client is (node rank, host, last attempt taken part in: handshake.answer), and
# what it was given that the peers must agree on (pods/shape.py; None: nothing)
Who = tuple[bytes, str, tuple[int, str, int], Mapping[str, str] | None]
# How a refusal names the two sides: the server, then this client ("the coordinator", "this pod")
Names = tuple[str, str]
POD = ("the coordinator", "this pod")


@dataclass(frozen=True)
class Backoff:
    first: float = 0.05
    longest: float = 1.0

    def pause(self, tries: int, rand: Callable[[], float] = random.random) -> float:
        """The pause after ``tries`` failed tries (1, 2, ...): ``first`` doubled each time up to ``longest``, a
        random half to all of it (``rand()`` in [0, 1))."""
        ceiling = min(self.longest, self.first * 2.0 ** min(max(tries, 1) - 1, 32))
        return ceiling * (0.5 + 0.5 * rand())


BACKOFF = Backoff()


@dataclass(frozen=True)
class Failed:
    """Why a dial ended without a link: ``kind`` "refused" (the server said no, in ``why``'s words), "no handshake"
    (a connection, but no dslaunch handshake before the deadline), "unreachable" (no connection: ``why`` is the
    system's words, "" when no try was made)."""

    kind: Literal["refused", "no handshake", "unreachable"]
    why: str = ""


def dial(
    addresses: Sequence[tuple[str, int]],
    who: Who,
    deadline: float,
    *,
    names: Names = POD,
    stopped: Callable[[], bool] = lambda: False,
    backoff: Backoff = BACKOFF,
    max_line: int = MAX_LINE,
    tried: list[Failed] | None = None,
) -> Link | Failed:
    """A link to the server at the first of ``addresses`` that lets this client in, trying each in turn until
    ``deadline`` (monotonic) or ``stopped()``; else the first address's last failure (the usual one: a fallback
    port's is told only if the first was never tried). A refusal is final where there is one address; with more,
    another may still take this client (a fallback port that another job's server holds). ``max_line``: the
    longest line the server may send on the link. ``tried``: each failed try is appended to it."""
    failure: Failed | None = None
    tries = 0
    while not stopped() and deadline - time.monotonic() > 0:
        for n, address in enumerate(addresses):
            if stopped() or deadline - time.monotonic() <= 0:
                break
            got = _try(address, who, deadline, names, max_line)
            if isinstance(got, Link):
                return got
            if tried is not None:
                tried.append(got)
            if n == 0 or failure is None:
                failure = got
            if got.kind == "refused" and len(addresses) == 1:
                return got
        tries += 1
        _pause(backoff.pause(tries), deadline, stopped)
    return failure or Failed("unreachable")


def _try(address: tuple[str, int], who: Who, deadline: float, names: Names, max_line: int) -> Link | Failed:
    try:
        sock = socket.create_connection(address, timeout=min(CONNECT_TRY, max(0.05, deadline - time.monotonic())))
    except OSError as exc:
        return Failed("unreachable", exc.strerror or str(exc))
    got = open_link(sock, who, min(time.monotonic() + HANDSHAKE_TIME, deadline), names, max_line=max_line)
    if isinstance(got, Link):
        return got
    sock.close()
    return Failed("refused", got) if got else Failed("no handshake")


def _pause(seconds: float, deadline: float, stopped: Callable[[], bool]) -> None:
    end = min(time.monotonic() + seconds, deadline)
    while not stopped() and (left := end - time.monotonic()) > 0:
        time.sleep(min(_SLICE, left))


def open_link(
    sock: socket.socket, who: Who, deadline: float, names: Names = POD, *, max_line: int = MAX_LINE
) -> Link | str:
    """The client's side of the handshake on a connected ``sock``: the authenticated link; a refusal's text; ""
    when the connection went wrong or ``deadline`` (monotonic) passed (worth another try while the dial's time
    lasts)."""
    key, run_id, me, shape = who
    server, client = names
    client_nonce = handshake.nonce()
    got = _exchange(sock, handshake.hello(key, run_id, client_nonce), deadline)  # first: the door's proof
    server_nonce = handshake.read_challenge(got[0]) if got else None
    if got is None or server_nonce is None:
        why = handshake.read_refusal(got[0]) if got else None
        return f"{server} refused {client}: {why}" if why is not None else ""
    got = _exchange(sock, handshake.answer(key, run_id, me, server_nonce, client_nonce, shape=shape), deadline)
    if got is None:  # its hello proved the key: pushed out of the door's proven set by newer ones, or too slow
        return ""
    if handshake.check_welcome(key, run_id, server_nonce, client_nonce, got[0]):
        to_client, to_server = handshake.session_keys(key, run_id, server_nonce, client_nonce)
        return Link(sock, server, got[1], keys=(to_server, to_client), max_line=max_line)
    why = handshake.read_refusal(got[0])
    if why is not None:
        return f"{server} refused {client}: {why}"
    return f"{server} could not prove it holds this job's secret"


def _exchange(sock: socket.socket, data: bytes, deadline: float) -> tuple[bytes, bytes] | None:
    """Send ``data``, then the answering line (and what came after it) before ``deadline``; None if none."""
    try:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        sock.sendall(data)
    except OSError:
        return None
    return read_handshake_line(sock, handshake.MAX_LINE, deadline)
