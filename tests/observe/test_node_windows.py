"""A node's ranks' windows as one event, read as columns (dslaunch/observe/node_windows.py, issue 54): the observer
fed each node's windows together (split over two events or not) names the same figures, breakdown and stragglers
as fed rank by rank, and both match a plain per-rank computation."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch import wire
from dslaunch.observe import breakdown as bd
from dslaunch.observe import session
from dslaunch.observe.node_windows import Period, one_rank, subset
from dslaunch.observe.record import Region, Window
from dslaunch.observe.settings import ObserveSettings
from dslaunch.observe.window_relay import node_windows
from dslaunch.plan import LaunchPlan, NodePlan, Program

REGIONS = ("forward", "backward", "ckpt")
SIXTY_FOURTHS = st.integers(0, 640).map(lambda n: n / 64)  # exact in binary: sums agree in any order


def _plan(nodes: int, per_node: int) -> LaunchPlan:
    layout = tuple(
        NodePlan(f"h{n}", n, ("0",) * per_node, tuple(range(n * per_node, (n + 1) * per_node))) for n in range(nodes)
    )
    return LaunchPlan("local", "r1", layout, "h0", 29500, Program("train.py"))


@st.composite
def _job(draw: st.DrawFn) -> tuple[LaunchPlan, list[list[Window]]]:
    """A job, and each window number's windows, one a rank (regions a rank may leave out)."""
    nodes, per_node = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    plan = _plan(nodes, per_node)
    windows = []
    for index in range(1, draw(st.integers(1, 4)) + 1):
        this = []
        for rank in range(nodes * per_node):
            steps = draw(st.integers(1, 5))
            names = draw(st.lists(st.sampled_from(REGIONS), unique=True, max_size=3))
            regions = tuple(Region(n, draw(SIXTY_FOURTHS), draw(SIXTY_FOURTHS)) for n in names)
            wall = draw(SIXTY_FOURTHS)
            first = 1700.0 + rank if index == 1 else 0.0
            this.append(Window(rank, index, index * 5, steps, wall, regions, first))
        windows.append(this)
    return plan, windows


def _observe(plan: LaunchPlan, events: list[wire.Event], warned: list[str]) -> session.Observer:
    observer = session.Observer(ObserveSettings(every_steps=None, straggler_factor=1.5), plan)
    observer.begin(plan)
    for event in events:
        observer.on_event(event, 0.0)
    return observer


def _figures(observer: session.Observer) -> tuple[Any, ...]:
    f = observer.figures
    period = bd.summarize_columns(observer.period.columns(), observer.where)
    return f.step, f.step_rate, f.stepping, f.regions, f.stragglers, period


def _reference(windows: list[list[Window]]) -> list[tuple[str, int, float, float, float, int]]:
    """The period's breakdown computed plainly: each rank's sums, then per region min, median, max, slowest."""
    sums: dict[int, dict[str, float]] = {}
    steps: dict[int, int] = {}
    for this in windows:
        for w in this:
            mine = sums.setdefault(w.rank, {})
            steps[w.rank] = steps.get(w.rank, 0) + w.steps
            mine[bd.STEP] = mine.get(bd.STEP, 0.0) + w.wall
            for r in w.regions:
                mine[r.name] = mine.get(r.name, 0.0) + r.total
    out = []
    for name in sorted({n for mine in sums.values() for n in mine}, key=lambda n: (n != bd.STEP, n)):
        values = {rank: mine[name] / steps[rank] for rank, mine in sums.items() if name in mine}
        top = max(values.values())
        slowest = min(rank for rank, v in values.items() if v == top)
        out.append((name, len(values), min(values.values()), statistics.median(values.values()), top, slowest))
    return out


@settings(max_examples=150, deadline=None)
@given(job=_job(), data=st.data())
def test_a_nodes_windows_as_one_event_give_what_rank_by_rank_gives(
    job: tuple[LaunchPlan, list[list[Window]]], data: st.DataObject
) -> None:
    plan, windows = job
    warned: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(session.Observer, "_warn", lambda _self, text: warned.append(text))
        _compare(plan, windows, data, warned)


def _compare(plan: LaunchPlan, windows: list[list[Window]], data: st.DataObject, warned: list[str]) -> None:
    by_rank = []
    for this in windows:
        for w in data.draw(st.permutations(this)):
            regions = tuple((r.name, r.total, r.fastest) for r in w.regions)
            node = plan.nodes[w.rank // len(plan.nodes[0].ranks)].node_rank
            by_rank.append(wire.TimerWindow(node, w.rank, w.index, w.step, w.steps, w.wall, regions, w.first_step_at))
    one = _observe(plan, by_rank, warned)
    lines_by_rank, warned[:] = list(warned), []
    by_node: list[wire.Event] = []
    for this in windows:
        for n in plan.nodes:
            mine = [(w.rank, w) for w in this if w.rank in n.ranks]
            cut = data.draw(st.integers(0, len(mine)))  # a node's ranks may come split over two events
            by_node += [node_windows(n.node_rank, this[0].index, part) for part in (mine[:cut], mine[cut:]) if part]
    together = _observe(plan, by_node, warned)
    assert _figures(together) == _figures(one)
    first = by_node[0]  # the attempt's first step: the earliest of the first event's ranks' (rank by rank: the first's)
    assert isinstance(first, wire.NodeWindows) and together.figures.first_step_at == first.first_step_at
    assert warned == lines_by_rank
    period = [(s.region, s.ranks, s.min, s.median, s.max, s.slowest_rank) for s in _figures(one)[-1]]
    assert period == _reference(windows)


def test_a_straggler_node_sent_as_one_event_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = _plan(4, 2)
    warned: list[str] = []
    monkeypatch.setattr(session.Observer, "_warn", lambda _self, text: warned.append(text))
    observer = session.Observer(ObserveSettings(straggler_factor=1.5, straggler_steps=5), plan)
    observer.begin(plan)
    for index in (1, 2):
        for n in plan.nodes:
            forward = 0.1 if n.node_rank == 2 else 0.02  # node 2: 5x the median in every step
            got = [
                (r, Window(r, index, index * 5, 5, 0.5, (Region("forward", forward * 5, forward),))) for r in n.ranks
            ]
            observer.on_event(node_windows(n.node_rank, index, got), 0.0)
    assert warned == [
        "straggler node: node 2 (h2): all its 2 ranks spend 100.0 ms-100.0 ms per step in 'forward', the job's "
        "median 20.0 ms (over 1.5x for 5 steps)"
    ]
    assert observer.figures.stragglers == 2 and observer.done_index == 2


def test_ranks_of_no_node_of_the_attempt_or_heard_already_are_left_out() -> None:
    plan = _plan(2, 2)
    observer = session.Observer(ObserveSettings(), plan)
    observer.begin(plan)
    forward = {"regions": ("forward",), "who": ((),), "totals": (0.5, 0.25, 9.0), "fastest": (0.1, 0.05, 1.0)}
    odd = wire.NodeWindows(0, 1, (0, 1, 99), (5, 5, 5), (5, 5, 5), (0.5, 0.5, 9.0), **forward)
    observer.on_event(odd, 0.0)  # rank 99 is no rank of the attempt
    observer.on_event(wire.NodeWindows(0, 1, (1,), (5,), (5,), (7.0,), (), (), (), ()), 0.0)  # rank 1 again: ignored
    assert [p.ranks for p in observer.pending[1].parts] == [(0, 1)] and observer.pending[1].live == 2
    observer.on_event(wire.RankExit(3, 1, 1, "h1", 9, 0, None, 0.0, False), 0.0)
    observer.on_event(wire.NodeWindows(1, 1, (2,), (5,), (5,), (0.5,), (), (), (), ()), 0.0)  # rank 3 ended
    assert observer.done_index == 1 and observer.figures.regions[0].max == 0.1


def test_a_subset_keeps_each_ranks_places_and_a_lone_rank_is_a_node_of_one() -> None:
    w = wire.NodeWindows(
        1,
        2,
        (4, 5, 6),
        (10, 10, 9),
        (5, 5, 4),
        (0.5, 0.6, 0.7),
        regions=("f", "ckpt"),
        who=((), (0, 2)),
        totals=(1.0, 2.0, 3.0, 7.0, 8.0),
        fastest=(0.1, 0.2, 0.3, 7.0, 8.0),
    )
    assert list(w.columns()) == [("f", (), (1.0, 2.0, 3.0), (0.1, 0.2, 0.3)), ("ckpt", (0, 2), (7.0, 8.0), (7.0, 8.0))]
    kept = {"regions": ("f", "ckpt"), "who": ((), ()), "totals": (3.0, 1.0, 8.0, 7.0), "fastest": (0.3, 0.1, 8.0, 7.0)}
    assert subset(w, [2, 0]) == wire.NodeWindows(1, 2, (6, 4), (9, 10), (4, 5), (0.7, 0.5), **kept)
    assert list(subset(w, [1]).columns()) == [("f", (), (2.0,), (0.2,))]
    lone = one_rank(wire.TimerWindow(1, 4, 2, 10, 5, 0.5, (("f", 1.0, 0.1), ("f", 2.0, 0.05)), 3.0))
    assert lone == wire.NodeWindows(1, 2, (4,), (10,), (5,), (0.5,), ("f",), ((),), (3.0,), (0.05,), 3.0)
    period = Period()
    period.add(w)
    period.add(subset(w, [0]))  # rank 4 also came alone: its sums are added up over both
    columns = period.columns()
    assert dict(zip(columns["f"].ranks, columns["f"].average)) == {4: 2.0 / 10, 5: 2.0 / 5, 6: 3.0 / 4}
    assert dict(zip(columns["ckpt"].ranks, columns["ckpt"].average)) == {4: 14.0 / 10, 6: 8.0 / 4}
