"""Stragglers named, by table: once when slow for long enough, once when fast again, a whole node as one."""

from __future__ import annotations

from dslaunch.observe.breakdown import STEP
from dslaunch.observe.stragglers import StragglerWatch, Where

WHERE = {r: Where(r // 4, f"h{r // 4}") for r in range(12)}  # three nodes of four ranks


def _window(
    slow: dict[int, float], *, jitter: dict[int, float] | None = None
) -> dict[int, dict[str, tuple[float, float]]]:
    """Every rank 20 ms in 'forward' (fastest step as the average), 'slow' ranks' average and fastest as given."""
    out = {}
    for rank in WHERE:
        t = slow.get(rank, 0.020)
        fastest = (jitter or {}).get(rank, t)
        out[rank] = {"forward": (t, fastest), "backward": (0.010, 0.010), STEP: (0.1, 0.1)}
    return out


def _feed(watch: StragglerWatch, windows: list[dict[int, dict[str, tuple[float, float]]]]) -> list[list[str]]:
    return [watch.feed(w) for w in windows]


def test_one_line_when_slow_and_one_when_recovered() -> None:
    watch = StragglerWatch(1.5, 2, 10, WHERE)
    lines = _feed(
        watch,
        [
            _window({}),
            _window({5: 0.040}),
            _window({5: 0.040}),
            _window({5: 0.040}),
            _window({}),
            _window({}),
            _window({}),
        ],
    )
    assert lines[0] == lines[1] == [] and lines[3] == lines[4] == lines[6] == []
    assert lines[2] == [
        "straggler: rank 5 (node 1, host h1) spends 40.0 ms per step in 'forward', the job's median 20.0 ms "
        "(over 1.5x for 10 steps)"
    ]
    assert lines[5] == [
        "straggler recovered: rank 5 (node 1, host h1) spends 20.0 ms per step in 'forward', the job's median 20.0 ms"
    ]


def test_one_fast_step_in_the_window_is_no_straggler() -> None:
    watch = StragglerWatch(1.5, 1, 5, WHERE)
    assert watch.feed(_window({5: 0.040}, jitter={5: 0.021})) == []  # a slow average from one slow step


def test_below_the_factor_or_the_floor_is_no_straggler() -> None:
    watch = StragglerWatch(1.5, 1, 5, WHERE)
    assert watch.feed(_window({5: 0.029})) == []  # 1.45x
    tiny = {r: {"tiny": (0.0001, 0.0001)} for r in WHERE}
    tiny[3] = {"tiny": (0.0008, 0.0008)}  # 8x, but 0.7 ms over the median: under the floor
    assert watch.feed(tiny) == []


def test_a_node_whose_ranks_are_all_slow_is_named_once() -> None:
    watch = StragglerWatch(1.5, 1, 5, WHERE)
    slow = dict.fromkeys(range(8, 12), 0.050)
    lines = watch.feed(_window(slow))
    assert lines == [
        "straggler node: node 2 (h2): all its 4 ranks spend 50.0 ms-50.0 ms per step in 'forward', the job's median "
        "20.0 ms (over 1.5x for 5 steps)"
    ]
    assert watch.feed(_window(slow)) == []
    assert watch.feed(_window({})) == ["straggler node recovered: node 2 in 'forward'"]


def test_an_interrupted_slow_streak_starts_over() -> None:
    watch = StragglerWatch(1.5, 3, 15, WHERE)
    assert (
        _feed(watch, [_window({1: 0.04}), _window({1: 0.04}), _window({}), _window({1: 0.04}), _window({1: 0.04})])
        == [[]] * 5
    )
    assert watch.feed(_window({1: 0.04})) != []


def test_a_window_of_few_ranks_is_no_measure() -> None:
    watch = StragglerWatch(1.5, 1, 5, WHERE)
    assert watch.feed(_window({5: 0.040})) != []
    ending = {r: t for r, t in _window({5: 0.020}).items() if r in (4, 5)}  # the job ends: two ranks' last window
    assert watch.feed(ending) == []
    assert watch.tracks[(5, "forward")].flagged  # no recovery from it
    few = StragglerWatch(1.5, 1, 5, {r: WHERE[r] for r in (0, 1)})
    assert few.feed({r: t for r, t in _window({1: 0.040}).items() if r in (0, 1)}) == []
