"""The step's peer-failed signal is recorded from the task's first line (real signals to this process)."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Iterator

import pytest

from dslaunch.runners.slurm import peer_signal


@pytest.fixture
def ear() -> Iterator[None]:
    previous = signal.getsignal(peer_signal.PEER_FAILED)
    saved = (peer_signal._ear.heard_at, peer_signal._ear.since, peer_signal._ear.on_heard)
    peer_signal._ear.heard_at, peer_signal._ear.since, peer_signal._ear.on_heard = -math.inf, math.inf, None
    try:
        yield
    finally:
        signal.signal(peer_signal.PEER_FAILED, previous)
        peer_signal._ear.heard_at, peer_signal._ear.since, peer_signal._ear.on_heard = saved


def _send() -> None:
    os.kill(os.getpid(), peer_signal.PEER_FAILED)
    time.sleep(0.01)  # the handler runs at the next bytecode boundary


def test_outside_a_step_nothing_listens(ear: None) -> None:
    peer_signal.listen_in_step({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0"})  # a batch script: no step id
    assert signal.getsignal(peer_signal.PEER_FAILED) == signal.SIG_DFL
    _send()  # ignored by default
    assert peer_signal.heard_at() == -math.inf


@pytest.mark.parametrize("name", ["SLURM_STEP_ID", "SLURM_STEPID"])
def test_in_a_step_every_signal_is_heard_and_stops_the_current_attempt(ear: None, name: str) -> None:
    peer_signal.listen_in_step({name: "0"})
    assert 0 < peer_signal.start_window_left() <= peer_signal.START_SKEW
    before = time.monotonic()
    _send()  # before any attempt: only recorded
    first = peer_signal.heard_at()
    assert first >= before
    stopped: list[float] = []
    peer_signal.on_heard(lambda: stopped.append(time.monotonic()))
    _send()
    assert peer_signal.heard_at() > first and len(stopped) == 1
    peer_signal.listen_in_step({name: "0"})  # again (attempt_in_step after the CLI): same handler, same start
    _send()
    assert len(stopped) == 2


def test_the_start_window_closes(ear: None, monkeypatch: pytest.MonkeyPatch) -> None:
    peer_signal.listen_in_step({"SLURM_STEP_ID": "3"})
    assert peer_signal.start_window_left() > peer_signal.START_SKEW - 5
    monkeypatch.setattr(peer_signal, "START_SKEW", 0.0)
    assert peer_signal.start_window_left() <= 0
