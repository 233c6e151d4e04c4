"""The node agent's console collapse: rank lines on their way into one sink pass a :class:`collapse.Collapser`.

What prints now goes into the sink with the stream's own output; the line of a closed window goes in when the
agent's loop calls :meth:`tick` (``next_due`` says when) or :meth:`flush` (a failed rank, the end). Lines that
start with ``\\r`` (a live progress bar on a terminal) and lines without the stream's prefix pass untouched, as
do the lines of a flood (``collapse.is_flood``: a read of over 1,024 lines or 32 KiB).
"""

from __future__ import annotations

from collections.abc import Sequence

from dslaunch.output.collapse import DEFAULT, STACKS_PAUSE, Collapsed, Collapser, Limits, is_flood, prefix_of
from dslaunch.output.relay import Piece
from dslaunch.output.sink import Sink


class SinkCollapse:
    def __init__(self, sink: Sink, host: str, with_host: bool, limits: Limits = DEFAULT) -> None:
        self.sink = sink
        self.host = host
        self.with_host = with_host
        self.core: Collapser[bytes] = Collapser(limits)
        self.paused_until = 0.0

    def pause_for_stacks(self, now: float) -> None:
        """Every rank was asked for its stack: what is held prints, and each stack prints whole (STACKS_PAUSE)."""
        self.flush()
        self.paused_until = now + STACKS_PAUSE

    def put(
        self, key: object, rank: int, prefix: bytes, pieces: Sequence[Piece], bar: bytes | None, *, now: float
    ) -> None:
        """``pieces`` (whole lines with ``prefix``) of stream ``key`` into the sink, less the lines held."""
        if not pieces or now < self.paused_until:
            self.sink.put(key, pieces, bar)
            return
        data = b"".join(pieces)
        if is_flood(data.count(b"\n"), len(data)):
            self.sink.put(key, [data], bar)
            return
        lines = data.split(b"\n")
        lines.pop()  # whole lines: the last one ended with a newline
        cut = len(prefix)
        if not data.startswith(b"\r") and b"\n\r" not in data:  # no live bar: every line has the prefix
            texts = [line[cut:] for line in lines]
            if self.core.add_unknown(rank, texts, now):  # the common case: none printed lately
                self.sink.put(key, [data], bar)
                return
        kept: list[bytes] = []
        closed: list[Collapsed[bytes]] = []
        add, host = self.core.add, self.host
        for line in lines:
            if line.startswith(prefix) and not add(rank, host, line[cut:], now, closed):
                if closed:
                    kept.extend(self._render(closed))
                continue
            if closed:
                kept.extend(self._render(closed))
            kept.append(line)
        self.sink.put(key, [b"\n".join(kept) + b"\n"] if kept else [], bar)

    def next_due(self) -> float | None:
        return self.core.next_due()

    def tick(self, now: float) -> None:
        closed: list[Collapsed[bytes]] = []
        self.core.tick(now, closed)
        self._put(closed)

    def flush(self) -> None:
        closed: list[Collapsed[bytes]] = []
        self.core.flush(closed)
        self._put(closed)

    def _put(self, closed: list[Collapsed[bytes]]) -> None:
        if closed:
            self.sink.put(self, [b"\n".join(self._render(closed)) + b"\n"])

    def _render(self, closed: list[Collapsed[bytes]]) -> list[bytes]:
        lines = [prefix_of(item, self.with_host).encode() + item.text for item in closed]
        closed.clear()
        return lines
