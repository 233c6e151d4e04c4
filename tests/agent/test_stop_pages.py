"""The agent's side of one stop step (agent/stop_pages.py): a node's proposal, and the whole protocol on real
pages under every interleaving hypothesis finds: ranks calling should_stop(), stop requests on any node, the
agents' proposals, the launcher's answer (job/stop_gather.py) and its writing. Whatever the order, every rank that
calls should_stop() answers True first at one and the same call, and no rank has answered False at or past it."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.agent.stop_pages import StopPages, node_step
from dslaunch.bootstrap.stop_step import CALLS, ENV, PAGE_BYTES, PENDING, WORD, decide
from dslaunch.job.stop_gather import job_step


@pytest.mark.parametrize(
    ("counts", "step"),
    [
        ([], None),
        ([0, 0], None),  # nobody calls should_stop()
        ([5], 6),
        ([5, 7, 0], 8),  # a non-participant does not count
        ([1, 1, 1], 2),
    ],
)
def test_a_node_proposes_the_first_call_none_of_its_ranks_has_made(counts: list[int], step: int | None) -> None:
    assert node_step(counts) == step


@given(st.lists(st.integers(0, 10**12), max_size=8))
def test_a_proposal_is_past_every_count(counts: list[int]) -> None:
    step = node_step(counts)
    assert (step is None) == (not any(counts))
    assert step is None or all(count < step for count in counts)


def test_pages_are_private_files_named_in_each_ranks_environment(tmp_path: Path) -> None:
    pages = StopPages(str(tmp_path), [4, 5])
    try:
        path = pages.env_for(5)[ENV]
        assert path == str(tmp_path / "stop.5") and os.stat(path).st_size == PAGE_BYTES
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert not pages.requested and pages.participants() == set() and pages.proposal() is None
    finally:
        pages.close()


class _Rank:
    """A rank's calls, as should_stop() makes them, on its own mapping of its page."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR)
        self.mapped = mmap.mmap(fd, PAGE_BYTES)
        os.close(fd)
        self.words = memoryview(self.mapped).cast("Q")
        self.calls = 0
        self.waiting = False  # a call saw PENDING: it waits for the step
        self.answers: list[bool] = []

    def call(self) -> None:
        if not self.waiting:
            self.calls += 1
            self.words[CALLS] = self.calls
        answer = decide(self.words[WORD], self.calls)
        self.waiting = answer is None
        if answer is not None:
            self.answers.append(answer)

    @property
    def stopped(self) -> bool:
        return bool(self.answers) and self.answers[-1]

    def close(self) -> None:
        self.words.release()
        self.mapped.close()


@dataclass
class _Job:
    nodes: list[StopPages]
    ranks: list[list[_Rank]]
    proposals: dict[int, int | None] = field(default_factory=dict)
    step: int | None = None

    def act(self, kind: str, index: int) -> None:
        node = index % len(self.nodes)
        pages = self.nodes[node]
        if kind == "call":
            flat = [r for rs in self.ranks for r in rs]
            rank = flat[index % len(flat)]
            if not rank.stopped:
                rank.call()
        elif kind == "request":
            pages.request(1e12)
        elif kind == "propose" and pages.requested and node not in self.proposals:
            self.proposals[node] = pages.proposal()
        elif kind == "answer" and self.step is None and len(self.proposals) == len(self.nodes):
            self.step = job_step(self.proposals.values())
        elif kind == "write" and self.step is not None:
            pages.set_target(self.step)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(1, 3), min_size=1, max_size=3),
    st.lists(
        st.tuples(
            st.sampled_from(["call", "call", "call", "request", "propose", "answer", "write"]), st.integers(0, 50)
        ),
        max_size=80,
    ),
)
def test_every_rank_stops_at_one_call_whatever_the_interleaving(
    tmp_path_factory: pytest.TempPathFactory, shape: list[int], schedule: list[tuple[str, int]]
) -> None:
    folder = tmp_path_factory.mktemp("pages")
    first = 0
    nodes, ranks = [], []
    for size in shape:
        pages = StopPages(str(folder), range(first, first + size))
        nodes.append(pages)
        ranks.append([_Rank(pages.env_for(r)[ENV]) for r in range(first, first + size)])
        first += size
    job = _Job(nodes, ranks)
    try:
        for kind, index in schedule:
            job.act(kind, index)
        for node in range(len(nodes)):  # then the protocol runs to its end: the launcher asks every node
            job.act("request", node)
            job.act("propose", node)
        job.act("answer", 0)
        for node in range(len(nodes)):
            job.act("write", node)
        everyone = [r for rs in ranks for r in rs]
        for rank in everyone:
            for _ in range(200):
                if rank.stopped:
                    break
                rank.call()
        assert all(r.stopped for r in everyone)
        callers = [r for r in everyone if r.calls]
        assert len({r.calls for r in callers}) == 1  # one stop step
        assert all(r.answers.count(True) == 1 and r.answers[-1] for r in callers)
        assert {r.calls for r in callers} == {job.step}
        assert all(r.words[WORD] != PENDING for r in everyone)
    finally:
        for rank in (r for rs in ranks for r in rs):
            rank.close()
        for pages in nodes:
            pages.close()
