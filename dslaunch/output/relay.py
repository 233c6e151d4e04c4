"""One rank stream (stdout or stderr) turned into prefixed output, a whole chunk at a time.

The cost is linear in the bytes whatever the line lengths: a chunk of complete lines is
prefixed with one ``bytes.replace``; per-line Python work happens only for lines that carry a
``\\r`` update, and the partial line is a ``bytearray`` that only grows at its end.

- A line is held until its newline, so lines of different ranks never mix, but never beyond
  ``LINE_LIMIT`` bytes: a longer line is cut into pieces, each with the prefix, none dropped.
- ``\\r`` updates (progress bars): a line shows its text after the last ``\\r``. A file or pipe
  gets that final state once, when the line ends. A terminal (``live``) also gets the current
  state after every chunk, which the sink replaces with a newer one while it is behind.
- ``\\r\\n`` is a line end and is written ``\\n``.
"""

from __future__ import annotations

LINE_LIMIT = 64 * 1024
# No larger than LINE_LIMIT: a line that starts and ends inside one read never needs cutting.
READ_SIZE = LINE_LIMIT

Piece = bytes | memoryview


class LineRelay:
    __slots__ = ("_cr", "_prev", "_seg", "barred", "live", "prefix")

    def __init__(self, prefix: bytes, live: bool) -> None:
        self.prefix = prefix
        self.live = live  # the sink is a terminal: show each \r state as it comes
        self.barred = False  # the current line has had a \r update
        self._seg = bytearray()  # the current line since its last \r
        self._prev = b""  # the state before that \r (shown when a line ends right after one)
        self._cr = False  # the last chunk ended in \r, which may be half of \r\n

    def feed(self, chunk: bytes) -> tuple[list[Piece], bytes | None]:
        """The output for ``chunk`` (pieces, in order) and the stream's live bar state, if any."""
        out: list[Piece] = []
        if self._cr:
            chunk = b"\r" + chunk
            self._cr = False
        if b"\r" in chunk:
            if chunk.endswith(b"\r"):
                chunk = chunk[:-1]
                self._cr = True
            chunk = chunk.replace(b"\r\n", b"\n")
        last = chunk.rfind(b"\n")
        if last < 0:
            self._extend(chunk, out)
        else:
            first = chunk.find(b"\n")
            self._extend(chunk[:first], out)
            self._end_line(out)
            if first < last:
                self._whole_lines(chunk[first + 1 : last + 1], out)
            self._extend(chunk[last + 1 :], out)
        return out, self.bar()

    def close(self) -> list[Piece]:
        """End of the stream: what is left of the last line, with a newline."""
        out: list[Piece] = []
        if self._cr:
            self._cr = False
            self._extend(b"\r", out)
        if self._seg or self.barred:
            self._end_line(out)
        return out

    def bar(self) -> bytes | None:
        """What a terminal should show now for an unfinished ``\\r``-updated line."""
        if not (self.live and self.barred):
            return None
        return b"\r" + self.prefix + bytes(self._seg or self._prev)

    def _extend(self, text: bytes, out: list[Piece]) -> None:
        """More of the current line (no newline in ``text``)."""
        if not text:
            return
        cut = text.rfind(b"\r")
        if cut >= 0:
            before = text.rfind(b"\r", 0, cut)
            prev = bytes(self._seg) + text[:cut] if before < 0 else text[before + 1 : cut]
            self._prev = prev[:LINE_LIMIT]
            self._seg = bytearray(text[cut + 1 :])
            self.barred = True
        else:
            self._seg += text
        while len(self._seg) > LINE_LIMIT:
            at = LINE_LIMIT
            while at > LINE_LIMIT - 3 and self._seg[at] & 0xC0 == 0x80:
                at -= 1  # keep a UTF-8 character whole: its continuation bytes go with it
            out.append(self._line(self._seg[:at]))
            del self._seg[:at]

    def _end_line(self, out: list[Piece]) -> None:
        out.append(self._line(self._seg if self._seg or not self.barred else self._prev))
        self._seg = bytearray()
        self._prev = b""
        self.barred = False

    def _line(self, text: bytes | bytearray) -> bytes:
        lead = b"\r" if self.live and self.barred else b""  # overwrite the live state on a terminal
        return lead + self.prefix + text + b"\n"

    def _whole_lines(self, block: bytes, out: list[Piece]) -> None:
        """Complete lines (``block`` ends with a newline), each shorter than LINE_LIMIT."""
        if b"\r" in block:
            block = b"\n".join(line[line.rfind(b"\r") + 1 :] for line in block[:-1].split(b"\n")) + b"\n"
        out.append(self.prefix)
        # replace() also adds a prefix after the final newline: leave it off without a copy
        out.append(memoryview(block.replace(b"\n", b"\n" + self.prefix))[: -len(self.prefix) or None])
