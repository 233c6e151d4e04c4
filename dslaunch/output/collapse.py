"""Identical console lines of many ranks, printed once with their ranks as a range (pure: no I/O, no clock).

The first line with a given text prints at once, as it would without collapsing. The same text from other
ranks within ``window`` seconds of that first line is held and counted; when the window closes, one line
prints for all of them (``[rank1-255]: text``), and nothing more if no other rank repeated it. Texts are
compared exactly (trailing spaces included): differing lines are never merged. A rank that repeats a text it
already has in the window closes that window first, so no rank's line is ever counted away.

Bounded: at most ``keys`` texts printed once (and ``text_bytes`` of them) are remembered, and windows hold at
most ``text_bytes`` of texts and ``held`` ranks; past a bound the oldest texts are forgotten (their next copy
prints at once) and the oldest window closes early. The shells (``agent/node_loop.py`` for the ranks one
agent writes, ``output/collapse_launcher.py`` in the launcher for remote agents) pass the time in, call :meth:`tick`
when :meth:`next_due` says, and :meth:`flush` before a failure is reported and at the end.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T", str, bytes)

WINDOW = 1.0  # seconds after a text's first line in which other ranks' copies are held
MAX_KEYS = 4096  # texts printed once that are remembered at most (the last 2048 to 4096)
MAX_TEXT = 1 << 20  # bytes of those texts; and bytes of the texts held
MAX_HELD = 1 << 16  # ranks held over all windows
# More lines or bytes than this from one read of a rank's pipe (agent) or in one run of a node's lines (launcher)
# is a flood (written faster than it is read): it passes as it is, with no per-line work. A warning that every rank
# prints once (or a config every rank dumps) is one small read; a rank streaming its own log at full speed fills
# every read (64 KiB), and collapsing that line by line cost 3.8x its throughput (bench/bench_collapse.py).
FLOOD_LINES = 1024
FLOOD_BYTES = 32 << 10


def is_flood(lines: int, size: int) -> bool:
    return lines > FLOOD_LINES or size >= FLOOD_BYTES


# Seconds after every rank was asked for its stack (SIGQUIT, --hang-timeout) in which nothing collapses: each
# rank's stack prints whole, as asked, rather than its lines shared with other ranks' stacks in range lines.
STACKS_PAUSE = 5.0


@dataclass(frozen=True)
class Limits:
    window: float = WINDOW
    keys: int = MAX_KEYS
    text_bytes: int = MAX_TEXT
    held: int = MAX_HELD


@dataclass(frozen=True)
class Collapsed(Generic[T]):
    """One line for the ranks that repeated ``text`` in a window (its first rank's line printed already)."""

    ranks: tuple[int, ...]  # sorted
    hosts: tuple[str, ...]  # sorted, distinct
    text: T


class _Window(Generic[T]):
    """A text that other ranks repeated: the ranks held, until it closes."""

    __slots__ = ("first", "hosts", "live", "opened", "ranks", "seq", "text")

    def __init__(self, text: T, first: int, opened: float, seq: int) -> None:
        self.text: T = text
        self.first = first
        self.opened = opened
        self.seq = seq
        self.ranks: set[int] = set()
        self.hosts: set[str] = set()
        self.live = True


DEFAULT = Limits()


class Collapser(Generic[T]):
    """Texts printed once are remembered cheaply, in two generations (the newer one is at most half the key and
    byte bounds; when full it becomes the older one, which is forgotten whole): per line a few dict look-ups, no
    per-line clean-up. Only a text another rank repeats gets a window, which holds its ranks until it closes."""

    def __init__(self, limits: Limits = DEFAULT) -> None:
        self.limits = limits
        self._seen: dict[T, tuple[float, int]] = {}  # text -> (when it printed, the rank that printed it)
        self._older: dict[T, tuple[float, int]] = {}
        self._seen_bytes = 0
        self._open: dict[T, _Window[T]] = {}  # the windows holding ranks
        self._due: list[tuple[float, int, _Window[T]]] = []  # the same, by when they close (closed ones skipped)
        self._open_bytes = 0
        self._held = 0
        self._seq = 0

    @property
    def held(self) -> int:
        return self._held

    def add(self, rank: int, host: str, text: T, now: float, out: list[Collapsed[T]]) -> bool:
        """A line of ``rank``: True if it prints now, False if it is held. Windows it had to close go to ``out``
        (to print before it)."""
        window = self._open.get(text)
        if window is not None:
            if now < window.opened + self.limits.window and rank != window.first and rank not in window.ranks:
                self._hold(window, rank, host, out)
                return False
            self._close(window, out)
        else:
            seen = self._seen.get(text) or self._older.get(text)
            if seen is not None and now < seen[0] + self.limits.window and rank != seen[1]:
                self._hold(self._new_window(text, seen, out), rank, host, out)
                return False
        self._remember(text, now, rank)
        return True

    def add_unknown(self, ranks: int | list[int], texts: list[T], now: float) -> bool:
        """Lines of ``ranks`` (one rank, or one each): True if they all print now, as none is known yet and
        no two ranks' are the same; then they are remembered at C speed. False: nothing done, give them to
        :meth:`add` one by one."""
        half_keys, half_bytes = self.limits.keys // 2, self.limits.text_bytes // 2
        if not texts:
            return True
        if len(texts) > half_keys or max(map(len, texts)) > half_bytes:
            return False
        if not isinstance(ranks, int) and len(set(texts)) < len(texts):
            return False  # copies inside the batch: one by one
        if not (
            self._seen.keys().isdisjoint(texts)
            and self._older.keys().isdisjoint(texts)
            and self._open.keys().isdisjoint(texts)
        ):
            return False
        size = sum(map(len, texts))
        if len(self._seen) + len(texts) > half_keys or self._seen_bytes + size > half_bytes:
            self._older, self._seen, self._seen_bytes = self._seen, {}, 0
        if isinstance(ranks, int):
            self._seen.update(dict.fromkeys(texts, (now, ranks)))
        else:
            self._seen.update(zip(texts, [(now, rank) for rank in ranks]))
        self._seen_bytes += size
        return True

    def next_due(self) -> float | None:
        """When the next window holding ranks closes (None: none holds any)."""
        due = self._due
        while due and not due[0][2].live:
            heapq.heappop(due)
        return due[0][0] if due else None

    def tick(self, now: float, out: list[Collapsed[T]]) -> None:
        """Close the windows that are over, in the order they opened, into ``out``."""
        due = self._due
        while due and due[0][0] <= now:
            window = heapq.heappop(due)[2]
            if window.live:
                self._close(window, out)

    def flush(self, out: list[Collapsed[T]]) -> None:
        """Close every window now (a rank failed, or the output ends), and forget every text."""
        for window in sorted(self._open.values(), key=lambda w: w.seq):
            self._close(window, out)
        self._due.clear()
        self._seen, self._older, self._seen_bytes = {}, {}, 0

    def _remember(self, text: T, now: float, rank: int) -> None:
        size = len(text)
        if size > self.limits.text_bytes // 2:
            return
        if len(self._seen) >= self.limits.keys // 2 or self._seen_bytes + size > self.limits.text_bytes // 2:
            self._older, self._seen, self._seen_bytes = self._seen, {}, 0
        self._seen[text] = (now, rank)
        self._seen_bytes += size

    def _new_window(self, text: T, seen: tuple[float, int], out: list[Collapsed[T]]) -> _Window[T]:
        size = len(text)
        while self._open and self._open_bytes + size > self.limits.text_bytes:
            self._close_oldest(out)
        self._seq += 1
        window = self._open[text] = _Window(text, seen[1], seen[0], self._seq)
        self._open_bytes += size
        if len(self._due) > 2 * len(self._open) + 64:  # closed early, not popped yet: drop them (bounded memory)
            self._due = [entry for entry in self._due if entry[2].live]
            heapq.heapify(self._due)
        heapq.heappush(self._due, (seen[0] + self.limits.window, self._seq, window))
        return window

    def _hold(self, window: _Window[T], rank: int, host: str, out: list[Collapsed[T]]) -> None:
        window.ranks.add(rank)
        window.hosts.add(host)
        self._held += 1
        if self._held > self.limits.held:
            self._close_oldest(out)

    def _close_oldest(self, out: list[Collapsed[T]]) -> None:
        while self._due:
            window = heapq.heappop(self._due)[2]
            if window.live:
                self._close(window, out)
                return

    def _close(self, window: _Window[T], out: list[Collapsed[T]]) -> None:
        """Print its line; forget the text, so its next copy prints at once."""
        window.live = False
        del self._open[window.text]
        self._open_bytes -= len(window.text)
        self._held -= len(window.ranks)
        self._seen.pop(window.text, None)
        self._older.pop(window.text, None)
        out.append(Collapsed(tuple(sorted(window.ranks)), tuple(sorted(window.hosts)), window.text))


def rank_ranges(ranks: Sequence[int]) -> str:
    """Sorted ranks as runs: ``0-255,257-1023``."""
    runs: list[str] = []
    start = prev = ranks[0]
    for rank in ranks[1:]:
        if rank != prev + 1:
            runs.append(f"{start}-{prev}" if prev > start else str(start))
            start = rank
        prev = rank
    runs.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(runs)


def prefix_of(item: Collapsed[T], with_host: bool) -> str:
    """The collapsed line's prefix: ``[rank1-255]: ``; ``[host:rank1-7]: `` when multi-node and on one host."""
    ranks = rank_ranges(item.ranks)
    if with_host and len(item.hosts) == 1:
        return f"[{item.hosts[0]}:rank{ranks}]: "
    return f"[rank{ranks}]: "


def agent_collapses(forked: bool) -> tuple[bool, bool]:
    """Whether a node agent collapses its ranks' (stdout, stderr) itself: where it writes them to the console
    directly, a forked agent (local, ``--node-rank``, Slurm). A remote agent's streams pass the launcher (mpirun's
    stderr too: runners/mpi.py reads it), which collapses over every node."""
    return forked, forked
