"""The job-wide breakdown's figures, by table and against a hand computation."""

from __future__ import annotations

import pytest

from dslaunch.observe import breakdown as bd
from dslaunch.observe.breakdown import STEP, RankTotals


@pytest.mark.parametrize(
    ("values", "middle"),
    [([], 0.0), ([3.0], 3.0), ([1.0, 3.0], 2.0), ([5.0, 1.0, 3.0], 3.0), ([4.0, 1.0, 3.0, 2.0], 2.5)],
)
def test_median(values: list[float], middle: float) -> None:
    assert bd.median(values) == middle


def _rank(rank: int, node: int, windows: list[tuple[int, float, dict[str, tuple[float, float]]]]) -> RankTotals:
    totals = RankTotals(rank, node, f"host{node}")
    for steps, wall, regions in windows:
        totals.add(steps, wall, [(k, t, f) for k, (t, f) in regions.items()])
    return totals


def test_figures_by_hand() -> None:
    # rank 0: 10 steps over two windows, forward 0.2 + 0.3 s; rank 1: forward 0.4 + 0.4; rank 2: 0.1 + 0.1
    # (per step: 0.05, 0.08, 0.02); backward only on ranks 0 and 1: 0.1 and 0.3 over 10 steps (0.01, 0.03)
    ranks = [
        _rank(
            0,
            0,
            [
                (5, 1.0, {"forward": (0.2, 0.03), "backward": (0.05, 0.01)}),
                (5, 1.0, {"forward": (0.3, 0.05), "backward": (0.05, 0.01)}),
            ],
        ),
        _rank(1, 0, [(5, 1.0, {"forward": (0.4, 0.07), "backward": (0.3, 0.05)}), (5, 1.0, {"forward": (0.4, 0.08)})]),
        _rank(2, 1, [(5, 1.0, {"forward": (0.1, 0.02)}), (5, 1.0, {"forward": (0.1, 0.02)})]),
    ]
    assert ranks[0].fastest == {"forward": 0.03, "backward": 0.01}
    stats = {s.region: s for s in bd.summarize(ranks)}
    assert list(stats) == [STEP, "backward", "forward"]
    forward = stats["forward"]
    assert (forward.ranks, forward.min, forward.median, forward.max) == (
        3,
        pytest.approx(0.02),
        pytest.approx(0.05),
        pytest.approx(0.08),
    )
    assert (forward.slowest_rank, forward.slowest_node, forward.slowest_host) == (1, 0, "host0")
    backward = stats["backward"]
    assert (backward.ranks, backward.min, backward.median, backward.max) == (
        2,
        pytest.approx(0.01),
        pytest.approx(0.02),
        pytest.approx(0.03),
    )
    assert stats[STEP].median == pytest.approx(0.2)
    assert stats[STEP].slowest_rank == 0  # a tie goes to the lowest rank


def test_the_table_and_the_record() -> None:
    stats = bd.summarize(
        [_rank(0, 0, [(2, 0.2, {"forward": (0.02, 0.01)})]), _rank(1, 1, [(2, 0.2, {"forward": (0.06, 0.03)})])]
    )
    table = bd.format_table(stats, 2, 3, 4)
    assert table.splitlines() == [
        "dslaunch: wall-clock breakdown, steps 2-3, 2 of 4 ranks (ms per step)",
        "  region     min  median    max  slowest",
        "  (step)   100.0   100.0  100.0  rank 0 (host0)",
        "  forward   10.0    20.0   30.0  rank 1 (host1)",
    ]
    rec = bd.as_record(stats, 2, 3)
    assert rec["steps"] == [2, 3]
    assert rec["regions"]["forward"]["slowest"] == {"rank": 1, "node": 1, "host": "host1"}  # type: ignore[index]


def test_a_rank_without_a_whole_step_is_left_out() -> None:
    assert bd.summarize([RankTotals(0, 0, "h")]) == ()
