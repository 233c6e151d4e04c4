"""One stop step for the whole job, the node agent's side: each rank's shared stop page (bootstrap/stop_step.py).

The agent makes one page per rank and each attempt (a 0600 file in its run folder, mapped here and in the rank;
``DSLAUNCH_STOP_FILE``). At a stop request it marks every page pending (:meth:`StopPages.request`), waits
``node_state.SETTLE`` so that a call racing with that mark has its count in the page, and proposes
:func:`node_step` of its participants' counts to the launcher, which answers with the job's step (the largest
proposal, ``job/stop_gather.py``); :meth:`StopPages.set_target` writes it. An agent with no launcher to answer
it decides alone (docs/stopping.md).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Sequence

from dslaunch import wire
from dslaunch.agent.node_state import ProposeStep, StopStepAction
from dslaunch.bootstrap.stop_step import CALLS, ENV, PAGE_BYTES, PENDING, WORD, target_word, write_deadline


def node_step(counts: Iterable[int]) -> int | None:
    """This node's proposal: the first call number no participant has made yet (its largest count + 1); None
    when no rank has called ``should_stop()`` (no participant)."""
    made = [count for count in counts if count > 0]
    return max(made) + 1 if made else None


class StopPages:
    """The stop pages of one node's ranks for one attempt."""

    def __init__(self, folder: str = "", ranks: Sequence[int] = ()) -> None:
        """``ranks``' pages in ``folder`` (none: an agent's pages before its ranks start)."""
        self._paths: dict[int, str] = {}
        self._maps: dict[int, tuple[mmap.mmap, memoryview]] = {}
        self._words: dict[int, memoryview] = {}
        self.step: int | None = None  # the step written, once it is
        for rank in ranks:
            path = os.path.join(folder, f"stop.{rank}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            try:
                os.ftruncate(fd, PAGE_BYTES)
                mapped = mmap.mmap(fd, PAGE_BYTES)
            finally:
                os.close(fd)
            self._paths[rank] = path
            view = memoryview(mapped)
            self._maps[rank] = (mapped, view)
            self._words[rank] = view.cast("Q")

    def env_for(self, rank: int) -> dict[str, str]:
        return {ENV: self._paths[rank]}

    @property
    def requested(self) -> bool:
        return any(words[WORD] for words in self._words.values())

    def request(self, deadline: float) -> None:
        """A stop was requested: every page pending (once), with the wall-clock ``deadline`` of the groups'
        SIGTERM."""
        for rank, words in self._words.items():
            if not words[WORD]:
                write_deadline(self._maps[rank][0], deadline)  # before the word: a rank that sees the word sees it
                words[WORD] = PENDING

    def counts(self) -> dict[int, int]:
        return {rank: words[CALLS] for rank, words in self._words.items()}

    def participants(self) -> set[int]:
        """The ranks that have called ``should_stop()`` at least once."""
        return {rank for rank, count in self.counts().items() if count > 0}

    def proposal(self) -> int | None:
        return node_step(self.counts().values())

    def set_target(self, step: int) -> None:
        """The job's stop step, in every page (the first one written stands)."""
        if self.step is not None:
            return
        self.step = step
        for words in self._words.values():
            words[WORD] = target_word(step)

    def close(self) -> None:
        for words in self._words.values():
            words.release()
        for mapped, view in self._maps.values():
            view.release()
            mapped.close()
        self._words, self._maps = {}, {}


def carry_out(pages: StopPages, action: StopStepAction, node_rank: int) -> wire.StopStep | None:
    """Do what the node's state asks of the stop pages; the proposal to send to the launcher, if any (the pending
    mark itself comes with the request's ``StopRequested``, node_loop.py)."""
    if not isinstance(action, ProposeStep):
        pages.set_target(action.step)
    elif action.alone:
        pages.set_target(pages.proposal() or 1)
    else:
        return wire.StopStep(node_rank, pages.proposal())
    return None
