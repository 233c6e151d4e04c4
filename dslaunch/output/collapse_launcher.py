"""The launcher's console collapse, over every remote node's lines (the cores are ``output/collapse.py``).

Remote agents (ssh, pdsh, and mpirun's stdout) do not collapse: their lines reach the launcher with their rank
prefix (``[host:rankN]: ``), and one :class:`LineCollapse` per stream (stdout, stderr) collapses them across
every node. Reader threads :meth:`LineCollapse.feed` it; the main loop ticks it (``supervise``'s poll) and flushes
it at the end. A failed rank flushes it in the order of its node's stream: its exit event on stdout (the pump), an
agent's ``wire.FLUSH_LINE`` on stderr (in :meth:`feed`, where the held lines take that line's place). A line whose
prefix names no rank of the plan passes untouched.
"""

from __future__ import annotations

import threading

from dslaunch import wire
from dslaunch.output.collapse import DEFAULT, STACKS_PAUSE, Collapsed, Collapser, Limits, is_flood, prefix_of
from dslaunch.output.prefix import output_prefix
from dslaunch.plan import LaunchPlan, NodePlan

_LONGEST_PREFIX = 300  # a host name is at most 253 characters


class LineCollapse:
    """Thread-safe: whole lines (``str``, each ending with a newline) in, what prints now out."""

    def __init__(self, plan: LaunchPlan, limits: Limits = DEFAULT) -> None:
        shown = _shown(plan)
        self.sources = {
            output_prefix(plan, node, i): (rank, node.host) for node in shown for i, rank in enumerate(node.ranks)
        }
        self.with_host = len(plan.nodes) > 1
        self.core: Collapser[str] = Collapser(limits)
        self.lock = threading.Lock()
        self.paused_until = 0.0
        self.closed = False  # the attempt's console closed: a reader's late line passes as it is, never held

    def pause_for_stacks(self, now: float) -> str:
        """Every rank was asked for its stack: each prints whole (STACKS_PAUSE); what was held, to print now."""
        self.paused_until = now + STACKS_PAUSE
        return self.flush()

    def feed(self, text: str, now: float) -> str:
        if is_flood(text.count("\n"), len(text)) or now < self.paused_until:
            return without_flush_lines(text)
        lines = text.split("\n")
        tail = lines.pop()  # "" for whole lines
        sources = self.sources
        with self.lock:
            if self.closed:  # a reader took this collapse just before the console closed: held, it would be lost
                return without_flush_lines(text)
            cuts = [line.find("]: ", 0, _LONGEST_PREFIX) + 3 for line in lines]
            found = [sources.get(line[:cut]) for line, cut in zip(lines, cuts)]
            if None not in found and self.core.add_unknown(
                [source[0] for source in found if source is not None],
                [line[cut:] for line, cut in zip(lines, cuts)],
                now,
            ):
                return text  # the common case: nothing in it printed lately
            kept = self._one_by_one(lines, cuts, found, now)
        kept.append(tail)
        return "\n".join(kept) if len(kept) > 1 else tail

    def _one_by_one(
        self, lines: list[str], cuts: list[int], found: list[tuple[int, str] | None], now: float
    ) -> list[str]:
        kept: list[str] = []
        closed: list[Collapsed[str]] = []
        add = self.core.add
        for line, cut, source in zip(lines, cuts, found):
            if source is None and line == wire.FLUSH_LINE:
                self.core.flush(closed)
                kept.extend(self._render(closed))
                continue
            printed = source is None or add(source[0], source[1], line[cut:], now, closed)
            if closed:
                kept.extend(self._render(closed))
            if printed:
                kept.append(line)
        return kept

    def due(self, now: float) -> str:
        """The lines of the windows closed by now."""
        closed: list[Collapsed[str]] = []
        with self.lock:
            self.core.tick(now, closed)
        return "".join(line + "\n" for line in self._render(closed))

    def flush(self, *, last: bool = False) -> str:
        """Every held line, to print now; ``last``: and hold none from now on."""
        closed: list[Collapsed[str]] = []
        with self.lock:
            self.core.flush(closed)
            self.closed = self.closed or last
        return "".join(line + "\n" for line in self._render(closed))

    def _render(self, closed: list[Collapsed[str]]) -> list[str]:
        lines = [prefix_of(item, self.with_host) + item.text for item in closed]
        closed.clear()
        return lines


def without_flush_lines(text: str) -> str:
    """``text`` less any ``wire.FLUSH_LINE`` (where nothing collapses, or a flood passes as it is)."""
    if wire.FLUSH_LINE not in text:
        return text
    return "".join(line for line in text.splitlines(keepends=True) if line.rstrip("\n") != wire.FLUSH_LINE)


def _shown(plan: LaunchPlan) -> tuple[NodePlan, ...]:
    """The nodes whose lines this launcher's console shows: a pod's launcher its own alone (each pod writes its
    own console: 131,072 prefixes an attempt at 16,384 pods of 8 ranks were made for nothing)."""
    if not plan.transport.console_per_node:
        return plan.nodes
    own = plan.manual_node or 0
    return tuple(node for node in plan.nodes if node.node_rank == own)
