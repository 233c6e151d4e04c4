"""How big an error record may be, on both sides of it: the rank's bootstrap bounds what it writes, the node agent
what it reads (a rank may write its error file itself). Stdlib only.

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
