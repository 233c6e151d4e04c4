"""Which pods an attempt takes (pods/assign.py), as tables: fixed jobs keep their node ranks; elastic ones give
ranks in join order, survivors keeping theirs, the rest standing by; when an attempt may start."""

from __future__ import annotations

import pytest

from dslaunch.pods.assign import Shape, Waiting, assign, missing, ready

FIXED = Shape(3, 3, fixed=True)
ELASTIC = Shape(2, 3, fixed=False, last_call=2.0)


def _w(*ranks: int) -> list[Waiting]:
    return [Waiting(key, rank, f"h{key}") for key, rank in enumerate(ranks, 1)]


@pytest.mark.parametrize(
    ("shape", "waiting", "ranks", "standbys"),
    [
        (FIXED, _w(2, 1), {1: 2, 2: 1}, []),
        (ELASTIC, _w(-1, -1), {1: 1, 2: 2}, []),
        (ELASTIC, _w(-1, -1, -1, -1), {1: 1, 2: 2}, [3, 4]),  # beyond MAX: standbys, in join order
        (ELASTIC, _w(-1, 2), {2: 2, 1: 1}, []),  # a survivor keeps node 2; the newcomer fills the hole
        (ELASTIC, _w(2, 2), {1: 2, 2: 1}, []),  # two claim 2: the first joined keeps it
        (ELASTIC, _w(5, -1), {1: 1, 2: 2}, []),  # a rank beyond the new count is not kept: join order
        (Shape(2, 2, fixed=False), _w(1, -1, 3), {1: 1}, [2, 3]),
    ],
)
def test_assign(shape: Shape, waiting: list[Waiting], ranks: dict[int, int], standbys: list[int]) -> None:
    assert assign(shape, waiting) == (ranks, standbys)


@pytest.mark.parametrize(
    ("shape", "waiting", "enough_since", "now", "expected"),
    [
        (FIXED, _w(1), None, 0.0, False),
        (FIXED, _w(1, 2), None, 0.0, True),
        (ELASTIC, _w(), None, 0.0, False),  # the coordinator alone: below MIN
        (ELASTIC, _w(-1), 10.0, 11.0, False),  # MIN there: the last call runs
        (ELASTIC, _w(-1), 10.0, 12.0, True),  # and is over
        (ELASTIC, _w(-1, -1), None, 0.0, True),  # MAX: at once
    ],
)
def test_ready(shape: Shape, waiting: list[Waiting], enough_since: float | None, now: float, expected: bool) -> None:
    assert ready(shape, waiting, enough_since, now) is expected


def test_missing_names_the_fixed_jobs_absent_node_ranks() -> None:
    assert missing(FIXED, _w(2)) == {1}
    assert missing(Shape(4, 4, fixed=True), _w()) == {1, 2, 3}
