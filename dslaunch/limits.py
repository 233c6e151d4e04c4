"""Caps checked before anything is allocated, and the one way numbers are read from text.

Numbers are ASCII digits only: ``str.isdigit`` and ``re``'s ``\\d`` also accept '٢' or '³',
which ``int`` then reads as 2 or refuses with a traceback.
"""

from __future__ import annotations

MAX_SLOTS_PER_HOST = 4096  # ranks on one host: more than any machine has GPUs or cores
MAX_WORLD_SIZE = 1 << 20  # ranks in one job


def ascii_int(text: str) -> int | None:
    """``text`` as a non-negative whole number written in ASCII digits, else None."""
    return int(text) if text.isascii() and text.isdigit() else None
