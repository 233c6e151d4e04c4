"""The launcher's observer fed real wire events: windows grouped and completed, figures, prints, the log file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.observe import session
from dslaunch.observe.breakdown import STEP
from dslaunch.observe.settings import ObserveSettings
from dslaunch.plan import LaunchPlan, NodePlan, Program

PLAN = LaunchPlan(
    "local",
    "r1",
    (NodePlan("a", 0, ("0", "1"), (0, 1)), NodePlan("b", 1, ("0",), (2,))),
    "a",
    29500,
    Program("train.py"),
)


def _w(rank: int, index: int, forward: float, steps: int = 5) -> wire.TimerWindow:
    return wire.TimerWindow(
        PLAN.nodes[rank // 2].node_rank,
        rank,
        index,
        index * steps + 1,
        steps,
        0.5,
        (("forward", forward * steps, forward),),
    )


def test_a_window_completes_when_every_rank_sent_it(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    observer = session.Observer(ObserveSettings(breakdown=True, every_steps=10, log_dir=str(tmp_path)), PLAN)
    observer.begin(PLAN)
    observer.on_event(_w(0, 1, 0.01), 0.0)
    observer.on_event(_w(1, 1, 0.02), 0.0)
    assert observer.figures.step == 0  # rank 2's window 1 is missing
    observer.on_event(_w(2, 1, 0.03), 0.0)
    f = observer.figures
    assert f.step == 6 and f.step_rate == pytest.approx(10.0)
    forward = {s.region: s for s in f.regions}["forward"]
    assert (forward.min, forward.median, forward.max, forward.slowest_rank) == (0.01, 0.02, 0.03, 2)
    assert f.stepping == pytest.approx(0.5)
    for rank in range(3):
        observer.on_event(_w(rank, 2, 0.01 * (rank + 1)), 1.0)
    err = capfd.readouterr().err
    assert "dslaunch: wall-clock breakdown, steps 2-11, 3 of 3 ranks (ms per step)" in err
    assert "  forward   10.0    20.0   30.0  rank 2 (b)" in err
    record = json.loads((tmp_path / "breakdown.jsonl").read_text())
    assert record["steps"] == [2, 11]
    assert record["regions"]["forward"]["median"] == 0.02
    assert record["regions"][STEP]["slowest"]["host"] == "a"


def test_a_rank_that_ended_or_fell_behind_does_not_hold_a_window() -> None:
    observer = session.Observer(ObserveSettings(), PLAN)
    observer.begin(PLAN)
    observer.on_event(wire.RankExit(2, 0, 1, "b", 9, 0, None, 0.0, False), 0.0)
    observer.on_event(_w(0, 1, 0.01), 0.0)
    observer.on_event(_w(1, 1, 0.01), 0.0)
    assert observer.figures.step == 6  # rank 2 is gone
    observer.begin(PLAN)  # a new attempt: every rank again
    observer.on_event(_w(0, 1, 0.01), 0.0)
    observer.on_event(_w(1, 1, 0.01), 0.0)
    observer.on_event(_w(0, 3, 0.01), 0.0)
    assert observer.done_index == 1  # two windows later: rank 2's window 1 is given up
    observer.on_event(_w(2, 1, 0.01), 0.0)  # too late: ignored
    assert observer.done_index == 1


def test_the_job_figures() -> None:
    observer = session.Observer(ObserveSettings(), PLAN)
    observer.begin(PLAN)
    for rank in range(3):
        observer.on_event(wire.Spawned(rank, 0, 100 + rank, "a"), 0.0)
    observer.on_event(wire.RankExit(1, 1, 0, "a", 101, 1, None, 0.0, False), 0.0)
    observer.on_event(wire.NodeLost(1, "b"), 0.0)
    observer.on_event(wire.Done(0, 1), 0.0)
    f = observer.figures
    assert (f.ranks, f.ranks_alive, f.nodes, f.nodes_lost, f.nodes_done, f.state) == (3, 2, 2, 1, 1, "running")
    observer.attempt_ended(1, "rank_failure", restarting=True)
    observer.attempt_ended(1, "rank_failure", restarting=True)
    assert f.restarts == {"rank_failure": 2} and f.state == "restarting"
    observer.attempt_ended(0, "", restarting=False)
    assert f.state == "succeeded"


def test_nothing_to_see_starts_nothing() -> None:
    assert session.start(ObserveSettings(straggler_factor=0), PLAN) is None
    assert isinstance(session.for_attempt(None, PLAN), session.Unobserved)
    assert session.status_line_of(None) is None


def test_the_metrics_file_is_written(tmp_path: Path) -> None:
    path = os.path.join(tmp_path, "job.prom")
    observer = session.start(ObserveSettings(metrics_file=path), PLAN)
    try:
        assert observer is not None and session.for_attempt(observer, PLAN) is observer
        assert observer.status_line is None  # none asked for
        observer.on_event(wire.Spawned(0, 0, 100, "a"), 0.0)
        observer.tick(10.0)
        text = Path(path).read_text()
        assert "dslaunch_ranks_alive 1.0" in text
        assert 'dslaunch_job_state{state="running"} 1.0' in text
    finally:
        observer.close()
    assert not [n for n in os.listdir(tmp_path) if n != "job.prom"]  # written aside, renamed


def test_a_breakdown_every_n_seconds(capfd: pytest.CaptureFixture[str]) -> None:
    observer = session.Observer(ObserveSettings(breakdown=True, every_steps=None, every_seconds=30.0), PLAN)
    observer.begin(PLAN)
    start = observer.printed_at
    for rank in range(3):
        observer.on_event(_w(rank, 1, 0.01), start)
    observer.tick(start + 29.0)
    assert "wall-clock breakdown" not in capfd.readouterr().err
    observer.tick(start + 30.0)
    assert "dslaunch: wall-clock breakdown, steps 2-6, 3 of 3 ranks" in capfd.readouterr().err
    observer.tick(start + 61.0)
    assert capfd.readouterr().err == ""  # nothing new since
