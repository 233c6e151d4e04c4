"""The job's wall time split by where it went (observe/figures.py, pure): against a hand-computed course."""

from __future__ import annotations

import pytest

from dslaunch.observe.figures import JobFigures


def _course() -> JobFigures:
    """Attempt 0 starts with the launcher (t=1000), steps at 1010, 30 s in steps, fails at 1050; attempt 1 starts
    at 1055, steps at 1060, 20 s in steps so far."""
    f = JobFigures(started=1000.0, state="running")
    f.attempt_began(1000.0, first=True)
    f.first_step(1010.0)
    f.stepped(30.0)
    f.attempt_over(1050.0, restarting=True)
    f.state = "restarting"
    f.attempt_began(1055.0, first=False)
    f.state = "running"
    f.first_step(1060.0)
    f.stepped(20.0)
    return f


def test_a_restarted_job_splits_into_steps_startup_restarts_lost_work_and_the_rest() -> None:
    f = _course()
    split = f.wall_split(1090.0)
    assert split == {"steps": 20.0, "startup": 15.0, "restarts": 5.0, "lost_work": 30.0, "other": 20.0}
    assert sum(split.values()) == pytest.approx(90.0)
    assert f.goodput(1090.0) == pytest.approx(20.0 / 90.0)  # the failed attempt's steps are not kept
    assert f.first_step_at == 1010.0  # the job's first step, not the latest attempt's


def test_an_attempt_that_has_not_stepped_counts_as_startup_while_it_runs() -> None:
    f = JobFigures(started=1000.0, state="running")
    f.attempt_began(1000.0, first=True)
    assert f.wall_split(1007.0)["startup"] == 7.0
    f.attempt_over(1009.0, restarting=True)  # failed before its first step: all of it was start-up
    f.state = "restarting"
    split = f.wall_split(1012.0)
    assert (split["startup"], split["restarts"], split["lost_work"]) == (9.0, 3.0, 0.0)


def test_a_stop_or_an_end_loses_nothing_and_stops_the_clocks() -> None:
    f = JobFigures(started=1000.0, state="running")
    f.attempt_began(1000.0, first=True)
    f.first_step(1004.0)
    f.stepped(10.0)
    f.attempt_over(1015.0, restarting=False)
    f.state = "succeeded"
    split = f.wall_split(1020.0)
    assert (split["steps"], split["startup"], split["restarts"], split["lost_work"]) == (10.0, 4.0, 0.0, 0.0)
    assert split["other"] == 6.0  # between windows and after the end


def test_the_split_never_goes_negative_on_clock_steps() -> None:
    f = JobFigures(started=1000.0, state="running")
    f.attempt_began(1000.0, first=True)
    f.first_step(990.0)  # a rank's clock behind the launcher's
    split = f.wall_split(995.0)
    assert all(v >= 0 for v in split.values()), split
