"""The challenge and response that lets only the job's pods onto the control channel (pure, stdlib only).

Both sides prove they hold the job's secret without sending it: the coordinator sends a fresh nonce, the pod
answers with its own nonce and an HMAC-SHA256 over both nonces, the run id and who it is; the coordinator answers
with an HMAC over the nonces the other way round, so a pod never follows a coordinator that does not hold the
secret either. A replayed answer fails (the coordinator's nonce is new each time); the run id in the MAC keeps
two jobs that share a secret apart.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from hashlib import sha256
from typing import Any

VERSION = 1
MAX_LINE = 8192  # a handshake line longer than this is junk: the connection is dropped (an answer carries a shape)
MAX_SHAPE = 16  # entries in an answer's shape (pods/shape.py), each name and value bounded
_SHAPE_NAME, _SHAPE_VALUE = 64, 256
_HEX = frozenset("0123456789abcdef")
MAX_HOST = 253  # a DNS name's longest
MAX_WHY = 4096  # a refusal's words


@dataclass(frozen=True)
class Joiner:
    """Who a pod said it was, once its MAC checked out."""

    node_rank: int  # -1: none asked (an elastic job's new pod)
    host: str
    nonce: str
    seen: int  # the last attempt this pod took part in (-1: none), so a recreated coordinator goes on counting
    shape: tuple[tuple[str, str], ...] = ()  # what it was given that the pods must agree on (pods/shape.py)


def nonce() -> str:
    return secrets.token_hex(16)


def mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, "\0".join(parts).encode(), sha256).hexdigest()


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def hello(key: bytes, run_id: str, client_nonce: str) -> bytes:
    """A pod's first line, sent as soon as it connects: a proof, over a nonce of its own, that it holds the key. The
    coordinator checks it before it spends anything on the connection (``channel/door.py``): a connection that
    sends no valid hello stays in the small pending set a flood competes for, one that does leaves it at once.
    (Replayable on its own; the challenge and answer that follow are not.)"""
    return line({"hello": VERSION, "nonce": client_nonce, "mac": mac(key, "hello", run_id, client_nonce)})


def check_hello(key: bytes, run_id: str, raw: bytes) -> str | None:
    """The client's nonce from a valid ``hello``, or None."""
    obj = _object(raw)
    if obj is None or obj.get("hello") != VERSION or not _is_nonce(obj.get("nonce")):
        return None
    proof = obj.get("mac")
    expected = mac(key, "hello", run_id, str(obj["nonce"]))
    return str(obj["nonce"]) if isinstance(proof, str) and hmac.compare_digest(expected, proof) else None


def challenge(server_nonce: str) -> bytes:
    return line({"dslaunch": VERSION, "nonce": server_nonce})


def read_challenge(raw: bytes) -> str | None:
    """The coordinator's nonce, or None for anything else."""
    obj = _object(raw)
    if obj is None or obj.get("dslaunch") != VERSION or not _is_nonce(obj.get("nonce")):
        return None
    return str(obj["nonce"])


def answer(
    key: bytes,
    run_id: str,
    me: tuple[int, str, int],
    server_nonce: str,
    client_nonce: str,
    *,
    shape: Mapping[str, str] | None = None,
) -> bytes:
    """``me``: this pod's node rank, host name, and the last attempt it took part in; ``shape``: what it was
    given that every pod must agree on (under the MAC too)."""
    node_rank, host, seen = me
    given = dict(shape or {})
    proof = mac(key, "join", run_id, str(node_rank), host, str(seen), server_nonce, client_nonce, _canonical(given))
    fields = {"node_rank": node_rank, "host": host, "seen": seen, "nonce": client_nonce, "mac": proof}
    return line({**fields, "shape": given} if given else fields)


def check_answer(key: bytes, run_id: str, server_nonce: str, raw: bytes) -> Joiner | None:
    """The pod that answered ``server_nonce`` with the job's key, or None (forged, malformed, another job)."""
    obj = _object(raw)
    if obj is None:
        return None
    node_rank, host, seen, client_nonce, proof = (obj.get(k) for k in ("node_rank", "host", "seen", "nonce", "mac"))
    if not (type(node_rank) is int and -1 <= node_rank < 1 << 20 and isinstance(host, str) and len(host) <= MAX_HOST):
        return None
    if not (type(seen) is int and -1 <= seen < 1 << 20):
        return None
    shape = _shape(obj.get("shape", {}))
    if not (_is_nonce(client_nonce) and isinstance(proof, str)) or shape is None:
        return None
    expected = mac(
        key, "join", run_id, str(node_rank), host, str(seen), server_nonce, str(client_nonce), _canonical(shape)
    )
    if not hmac.compare_digest(expected, proof):
        return None
    return Joiner(node_rank, host, str(client_nonce), seen, tuple(shape.items()))


def welcome(key: bytes, run_id: str, server_nonce: str, client_nonce: str) -> bytes:
    return line({"mac": mac(key, "welcome", run_id, client_nonce, server_nonce)})


def check_welcome(key: bytes, run_id: str, server_nonce: str, client_nonce: str, raw: bytes) -> bool:
    obj = _object(raw)
    proof = obj.get("mac") if obj is not None else None
    expected = mac(key, "welcome", run_id, client_nonce, server_nonce)
    return isinstance(proof, str) and hmac.compare_digest(expected, proof)


def refusal(why: str) -> bytes:
    """The server's no, in the handshake (no MAC yet): said to a peer it will not admit, which then stops trying."""
    return line({"t": "refused", "why": why[:MAX_WHY]})


def read_refusal(raw: bytes) -> str | None:
    """Why the server said no (``refusal``), or None for any other line."""
    obj = _object(raw)
    why = obj.get("why") if obj is not None and obj.get("t") == "refused" and len(obj) == 2 else None
    return why if isinstance(why, str) and len(why) <= MAX_WHY else None


def session_keys(key: bytes, run_id: str, server_nonce: str, client_nonce: str) -> tuple[bytes, bytes]:
    """The keys that MAC every line after the handshake (``pods/link.Sealer``): the coordinator's to the pod, the
    pod's to the coordinator. Fresh for each connection (both nonces), and one per direction, so a line cannot be
    reflected back to its sender."""

    def one(way: str) -> bytes:
        return hmac.new(key, "\0".join(("session", way, run_id, server_nonce, client_nonce)).encode(), sha256).digest()

    return one("to pod"), one("to coordinator")


def _object(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_LINE:
        return None
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def _shape(value: object) -> dict[str, str] | None:
    """An answer's shape: names to values, both strings, bounded; None for anything else."""
    if not isinstance(value, dict) or len(value) > MAX_SHAPE:
        return None
    for name, text in value.items():
        if not (isinstance(text, str) and len(name) <= _SHAPE_NAME and len(text) <= _SHAPE_VALUE):
            return None
    return value


def _canonical(shape: Mapping[str, str]) -> str:
    return json.dumps(shape, sort_keys=True, separators=(",", ":"))


def _is_nonce(value: object) -> bool:
    return isinstance(value, str) and len(value) == 32 and set(value) <= _HEX
