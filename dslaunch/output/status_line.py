"""The status line kept at the bottom of a terminal (``--status-line``, docs/observability.md).

The launcher knows the job's figures; whoever writes the terminal draws the line below what it writes (a sink,
``output/sink.py``). One :class:`StatusLine` a job, made by the launcher before any agent is forked, and handed
down to whoever draws it: to the launcher's attempt sink where the launcher is its terminal's one writer
(``output/terminal.py``), else to the forked node agent that writes the ranks' output to the terminal
(``output/pump.py``). Its text sits on an anonymous shared memory page, so the agent, a fork, reads what the
launcher posts; a seqlock keeps a reader from taking a line half written, and nothing here blocks either side.
"""

from __future__ import annotations

import mmap
import os
import struct
import unicodedata
from collections.abc import Callable

ERASE = b"\r\x1b[2K"  # to the line's start, and clear it
_SIZE = 4096
_HEAD = struct.Struct("<QH")  # sequence number (odd while a post is under way), length
MAX_TEXT = _SIZE - _HEAD.size


class StatusLine:
    def __init__(self) -> None:
        self._page = mmap.mmap(-1, _SIZE, flags=mmap.MAP_SHARED)
        self._seq = 0
        # While the launcher's attempt sink writes the terminal and draws the line (output/terminal.py): where the
        # launcher's own lines queue, in order with everything else. None: an agent may draw it.
        self.queue: Callable[[bytes], bool] | None = None

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

    def over_it(self, fd: int = 2) -> bytes:
        """What a line the launcher prints itself starts with while the agent may have drawn the line on the same
        terminal: the erase (the agent draws it again below at its next look)."""
        return ERASE if self.queue is None and os.isatty(fd) else b""

    def clear(self, fd: int = 2) -> None:
        if data := self.over_it(fd):
            try:
                os.write(fd, data)
            except OSError:
                pass


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
