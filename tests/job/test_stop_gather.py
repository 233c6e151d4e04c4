"""The launcher's side of one stop step (job/stop_gather.py), pure: the job's step from the nodes' proposals, and
when it is decided."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.job.stop_gather import GATHER_BOUND, StopStepGather, job_step


@pytest.mark.parametrize(
    ("proposals", "step"),
    [
        ([], 1),  # no node answered: a rank that starts calling stops at once
        ([None, None], 1),  # no node has a rank that calls should_stop()
        ([7, None, 9, 8], 9),
        ([3], 3),
    ],
)
def test_the_jobs_step_is_the_largest_proposal(proposals: list[int | None], step: int) -> None:
    assert job_step(proposals) == step


@given(st.lists(st.one_of(st.none(), st.integers(1, 10**15)), max_size=16))
def test_the_jobs_step_is_at_or_past_every_proposal(proposals: list[int | None]) -> None:
    step = job_step(proposals)
    assert step >= 1 and all(p is None or p <= step for p in proposals)


def test_decided_once_every_node_proposed_or_ended_and_only_once() -> None:
    gather = StopStepGather(frozenset({0, 1, 2}))
    assert gather.decide(set(), 0.0) is None  # no stop requested
    gather.propose(1, 12)  # a node asked first: its proposal comes before the request is known
    gather.begin(10.0)
    assert gather.decide(set(), 10.0) is None and gather.wait_cap(10.5) == pytest.approx(GATHER_BOUND - 0.5)
    gather.propose(0, 14)
    assert gather.decide(set(), 10.1) is None
    assert gather.decide({2}, 10.2) == 14  # node 2 ended without proposing
    assert gather.decide({2}, 10.3) is None and gather.step == 14 and gather.wait_cap(10.3) is None


def test_a_node_that_never_answers_holds_the_step_no_longer_than_the_bound() -> None:
    gather = StopStepGather(frozenset({0, 1}))
    gather.begin(0.0)
    gather.propose(0, 5)
    assert gather.decide(set(), GATHER_BOUND - 0.01) is None
    assert gather.decide(set(), GATHER_BOUND) == 5


@given(st.lists(st.tuples(st.integers(0, 2), st.one_of(st.none(), st.integers(1, 100))), max_size=10))
def test_a_node_proposing_again_keeps_its_largest(proposals: list[tuple[int, int | None]]) -> None:
    gather = StopStepGather(frozenset({0, 1, 2}))
    gather.begin(0.0)
    for node, step in proposals:
        gather.propose(node, step)
    step = gather.decide({0, 1, 2}, 0.0)
    assert step == (job_step(s for _n, s in proposals) if proposals else None)  # no proposal: nobody waits
