"""A rank's failure record on both sides of it (stdlib only): how big it may be (the rank's bootstrap bounds what it
writes, the node agent what it reads: a rank may write its error file itself), and which failed rank is a job's
root cause (the agent's and the launcher's choice alike, :func:`cause_order`).

A text over its bound keeps its head and its tail (the frames where it started, the exception line where it
ended) and says how much was cut between them.
"""

from __future__ import annotations

TRACEBACK_CHARS = 64 << 10  # a traceback in an error record, the exit event and the summary
MESSAGE_CHARS = 4 << 10  # an exception's message, beside its traceback
READ_BYTES = 1 << 20  # the most of an error file the agent reads: what the bootstrap writes, JSON-escaped, fits


def bounded(text: str, limit: int = TRACEBACK_CHARS) -> str:
    """``text`` if it has at most ``limit`` characters; else its head and tail around a note of the cut, ``limit``
    characters in all (so bounding twice changes nothing)."""
    if len(text) <= limit:
        return text
    note = f"\n[... {{}} of {len(text)} characters cut by dslaunch ...]\n"
    keep = max(limit - len(note.format(len(text))), 0)
    head = keep - keep // 2
    cut = len(text) - keep
    return text[:head] + note.format(cut) + text[len(text) - keep // 2 :]


# What a rank's error says when a peer went away under a collective: gloo's tcp transport, NCCL. A rank that ends at
# once (os._exit, a crash) closes its sockets before it is a zombie its agent can reap, so under load such a peer's
# failure can be dated before it: the peer's is the consequence.
PEER_GONE = (
    "Connection reset by peer",
    "Connection closed by peer",
    "remote process exited or there was a network error",
)


def peer_gone(error: str | None, stderr_tail: tuple[str, ...]) -> bool:
    """A failure's error record or last stderr lines say a peer went away."""
    text = "\n".join((error or "", *stderr_tail[-8:]))
    return any(mark in text for mark in PEER_GONE)


def cause_order(error: str | None, stderr_tail: tuple[str, ...], ts: float) -> tuple[bool, float]:
    """The root cause is the failure with the least: one of its own before a peer's consequence, then the earliest."""
    return (peer_gone(error, stderr_tail), ts)
