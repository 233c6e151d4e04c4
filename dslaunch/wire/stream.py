"""A remote agent's stdout as it arrives: each event line alone, output lines in runs (``split_events``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dslaunch.wire.events import MARKER

_MARK = MARKER.encode()
# Agent -> launcher, a line of its own on a remote agent's stderr, never shown: a rank failed, so the lines the
# launcher's console collapse holds print now, before the lines that follow it on that stream (the failing node's
# ranks saying they were stopped). Its stdout needs none: the failed rank's exit event is on that stream.
FLUSH_LINE = "@dslaunch-flush"
_LINE_MARK = b"\n" + _MARK
_HELD_MAX = 1 << 20  # an unfinished line longer than this (not from an agent: they cut at 64 KiB) goes as is


def split_events(chunks: Iterable[bytes]) -> Iterator[str]:
    """A mixed stream as it arrives, in whole lines: each event line alone, output lines in runs.

    Linear in the bytes: output is never split line by line, only cut where a marked line starts.
    """
    held = b""
    for chunk in chunks:
        data = held + chunk if held else chunk
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) < _HELD_MAX:
            held = data
            continue
        end = end or len(data)
        held = data[end:]
        yield from _runs(data[:end])
    if held:
        yield from _runs(held)


def _runs(block: bytes) -> Iterator[str]:
    pos = 0
    while pos < len(block):
        if block.startswith(_MARK, pos):
            stop = block.find(b"\n", pos) + 1 or len(block)
        else:
            found = block.find(_LINE_MARK, pos)
            stop = len(block) if found < 0 else found + 1
        yield block[pos:stop].decode("utf-8", "replace")
        pos = stop
