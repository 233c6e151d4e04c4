"""The status line kept at the bottom of a terminal (``--status-line``, docs/observability.md).

The launcher knows the job's figures; a forked node agent writes the ranks' output to the terminal. They share one
:class:`Board`, an anonymous shared memory page made before the agent is forked: the launcher posts the line,
the agent's sink (``output/sink.py``) draws it below the output it writes and redraws it as it changes. A seqlock
keeps a reader from taking a line half written; nothing here blocks either side.
"""

from __future__ import annotations

import mmap
import os
import struct
import unicodedata

ERASE = b"\r\x1b[2K"  # to the line's start, and clear it
_SIZE = 4096
_HEAD = struct.Struct("<QH")  # sequence number (odd while a post is under way), length
MAX_TEXT = _SIZE - _HEAD.size


class Board:
    def __init__(self) -> None:
        self._page = mmap.mmap(-1, _SIZE, flags=mmap.MAP_SHARED)
        self._seq = 0

    def post(self, text: str) -> None:
        data = text.encode("utf-8", "replace")[:MAX_TEXT]
        self._seq += 1
        self._page[:8] = struct.pack("<Q", self._seq)  # odd: a reader retries
        self._page[_HEAD.size : _HEAD.size + len(data)] = data
        self._page[8:10] = struct.pack("<H", len(data))
        self._seq += 1
        self._page[:8] = struct.pack("<Q", self._seq)

    def read(self) -> bytes:
        """The line posted last (``b""``: none, or a post was under way on every try)."""
        for _ in range(8):
            seq, size = _HEAD.unpack_from(self._page)
            data = bytes(self._page[_HEAD.size : _HEAD.size + min(size, MAX_TEXT)])
            if not seq & 1 and struct.unpack_from("<Q", self._page)[0] == seq:
                return data
        return b""


def fit(text: bytes, columns: int) -> bytes:
    """``text`` as one terminal line of at most ``columns - 1`` cells (no wrap: a wrapped line could not be
    erased), without control characters; wide characters count two cells."""
    out, cells = [], 0
    for ch in text.decode("utf-8", "replace"):
        if unicodedata.category(ch)[0] == "C":
            continue
        width = 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
        if cells + width > max(0, columns - 1):
            break
        out.append(ch)
        cells += width
    return "".join(out).encode()


_board: Board | None = None
launcher_draws = False  # the launcher's own sink draws the line (output/terminal.py): its lines queue before it


def open_board() -> Board:
    """This launcher's board (one a process), made before any agent is forked."""
    global _board
    if _board is None:
        _board = Board()
    return _board


def board() -> Board | None:
    return _board


def over_the_line(fd: int = 2) -> bytes:
    """What a line the launcher prints itself starts with while the agent may have drawn the status line on the
    same terminal: the erase (the agent draws it again below at its next look)."""
    return ERASE if _board is not None and not launcher_draws and os.isatty(fd) else b""


def clear(fd: int = 2) -> None:
    if data := over_the_line(fd):
        try:
            os.write(fd, data)
        except OSError:
            pass
