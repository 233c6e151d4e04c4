"""One stop step for the whole job, the launcher's side (pure): gather each node's proposal, answer with the largest.

At a requested stop every agent marks its ranks' stop pages pending and proposes the first call of
``should_stop()`` that none of its ranks has made (``wire.StopStep``). The job's step is the largest proposal:
no rank has passed it when it is written, so every rank that calls ``should_stop()`` answers True at that same
call, and a rank behind runs on to it. Ranks wait only for this answer, never for each other, so the answer
must come: once every node has proposed or ended, or ``GATHER_BOUND`` seconds after the request with the
proposals that came (a node that has not answered by then is lost or cut off, docs/stopping.md).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field

GATHER_BOUND = 5.0


def job_step(proposals: Iterable[int | None]) -> int:
    """The job's stop step: the largest proposal; 1 when no node has a rank that calls ``should_stop()`` (a rank
    that starts calling it now stops at once)."""
    return max((step for step in proposals if step is not None), default=1)


@dataclass
class StopStepGather:
    """The proposals of one attempt's nodes (``expected``, node ranks) and the step, once decided."""

    expected: frozenset[int]
    proposals: dict[int, int | None] = field(default_factory=dict)
    since: float | None = None  # monotonic: when the stop was requested
    step: int | None = None  # the job's step, once decided (it is sent once)

    def begin(self, now: float) -> None:
        if self.since is None:
            self.since = now

    def propose(self, node_rank: int, step: int | None) -> None:
        """A node's proposal (its largest, if it sends more than one: a larger step is always safe)."""
        known = self.proposals.get(node_rank)
        self.proposals[node_rank] = step if known is None else max(known, step or 0)

    def decide(self, ended: Collection[int], now: float) -> int | None:
        """The job's step, once, after a first proposal: when every node has proposed or ended (``ended``), or at the
        bound; else None."""
        if self.since is None or self.step is not None or not self.proposals:
            return None  # no node has proposed: none waits for an answer
        early = now - self.since < GATHER_BOUND
        if early and len(self.proposals) + len(ended) < len(self.expected):
            return None  # some node cannot have proposed or ended yet: O(1), not a set difference per proposal
        if early and self.expected.difference(self.proposals, ended):
            return None
        self.step = job_step(self.proposals.values())
        return self.step

    def wait_cap(self, now: float) -> float | None:
        """How long until the bound, while the step is not decided."""
        if self.since is None or self.step is not None:
            return None
        return max(0.0, self.since + GATHER_BOUND - now)
