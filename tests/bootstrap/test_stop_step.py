"""should_stop() and stop_deadline(), the rank's side of one stop step (bootstrap/stop_step.py): the answer for
each word and call number, and a real page shared with the agent's StopPages (in this process, a second thread
playing the agent)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dslaunch
from dslaunch.agent.stop_pages import StopPages
from dslaunch.bootstrap import stop_step
from dslaunch.bootstrap.stop_step import PENDING, decide, target_word


@pytest.mark.parametrize(
    ("word", "calls", "answer"),
    [
        (0, 1, False),  # no stop
        (0, 10**9, False),
        (PENDING, 5, None),  # requested, step not known: wait
        (target_word(7), 6, False),  # before the step: go on
        (target_word(7), 7, True),  # the step
        (target_word(7), 8, True),  # past it (a rank that called first after the answer, or a late one)
        (target_word(1), 1, True),
    ],
)
def test_each_word_and_call_number_has_one_answer(word: int, calls: int, answer: bool | None) -> None:
    assert decide(word, calls) is answer


@pytest.fixture
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StopPages]:
    """Rank 0's page, attached as a rank would attach it (the module's state starts afresh)."""
    pages = StopPages(str(tmp_path), [0])
    monkeypatch.setenv(stop_step.ENV, pages.env_for(0)[stop_step.ENV])
    for name, value in (("_page", None), ("_mapped", None), ("_absent", False), ("_calls", 0)):
        monkeypatch.setattr(stop_step, name, value)
    yield pages
    monkeypatch.setattr(stop_step, "_page", None)
    monkeypatch.setattr(stop_step, "_mapped", None)
    pages.close()


def test_calls_are_counted_in_the_page_and_the_step_is_answered_at_its_call(page: StopPages) -> None:
    assert [dslaunch.should_stop() for _ in range(3)] == [False] * 3
    assert page.counts() == {0: 3} and page.participants() == {0} and page.proposal() == 4
    assert dslaunch.stop_deadline() is None
    page.request(time.time() + 60)
    page.set_target(5)
    assert dslaunch.stop_deadline() == pytest.approx(time.time() + 60, abs=5)
    assert [dslaunch.should_stop() for _ in range(3)] == [False, True, True]  # calls 4, 5, 6


def test_a_pending_stop_waits_for_the_agents_answer(page: StopPages) -> None:
    assert not dslaunch.should_stop()
    page.request(time.time() + 60)
    threading.Timer(0.2, page.set_target, args=(3,)).start()
    began = time.monotonic()
    assert not dslaunch.should_stop()  # call 2 waits for the answer: 3, so it goes on
    assert 0.15 < time.monotonic() - began < 5
    assert dslaunch.should_stop()  # call 3


def test_a_pending_stop_with_no_answer_stops_at_the_deadline(page: StopPages) -> None:
    page.request(time.time() + 0.2)
    began = time.monotonic()
    assert dslaunch.should_stop()
    assert 0.1 < time.monotonic() - began < 5


def test_the_first_step_written_stands_and_a_request_keeps_its_first_deadline(page: StopPages) -> None:
    page.request(time.time() + 60)
    page.request(time.time() + 1)
    page.set_target(2)
    page.set_target(9)
    assert page.step == 2 and dslaunch.stop_deadline() == pytest.approx(time.time() + 60, abs=5)
    assert [dslaunch.should_stop(), dslaunch.should_stop()] == [False, True]


def test_outside_dslaunch_it_is_always_false_and_never_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in (("_page", None), ("_absent", False), ("_calls", 0)):
        monkeypatch.setattr(stop_step, name, value)
    monkeypatch.delenv(stop_step.ENV, raising=False)
    assert not dslaunch.should_stop() and dslaunch.stop_deadline() is None
    monkeypatch.setattr(stop_step, "_absent", False)
    monkeypatch.setenv(stop_step.ENV, str(tmp_path / "gone"))  # a page that is not there: as outside dslaunch
    assert not dslaunch.should_stop() and dslaunch.stop_deadline() is None


@pytest.mark.launch
def test_importing_it_is_cheap() -> None:
    probe = "import sys, dslaunch; dslaunch.should_stop(); print(sorted(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "torch" not in loaded and "'typing'" not in loaded and "dslaunch.bootstrap.stop_step" in loaded
