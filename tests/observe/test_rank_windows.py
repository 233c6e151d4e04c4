"""The rank's windows, written as a rank writes them and read back as its agent reads them."""

from __future__ import annotations

import os
from pathlib import Path

from dslaunch.observe import rank_windows, record


def test_windows_of_sums_and_fastest_steps(tmp_path: Path) -> None:
    path = tmp_path / "w"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, record.FILE_SIZE)
    windows = rank_windows._Windows(os.dup(fd), 3)
    windows.add(1, {"forward": 9.0})  # the first step: only the clock starts
    for step, forward in [(2, 0.02), (3, 0.01), (4, 0.03), (5, 0.05), (6, 0.04), (7, 0.06)]:
        windows.add(step, {"forward": forward, **({"io": 0.5} if step == 5 else {})})
    got = [record.decode(payload) for _, payload in record.read_new(fd, 0)]
    assert [(w.index, w.step, w.steps) for w in got if w] == [(1, 3, 2), (2, 6, 3)]  # windows of step numbers
    first, second = got
    assert first is not None and second is not None
    assert first.first_step_at > 0 and second.first_step_at == 0
    assert {r.name: (round(r.total, 6), r.fastest) for r in first.regions} == {"forward": (0.03, 0.01)}
    assert {r.name: (round(r.total, 6), r.fastest) for r in second.regions} == {
        "forward": (0.12, 0.03),
        "io": (0.5, 0.5),
    }
    assert 0 <= first.wall < 5
    os.close(fd)


def test_step_numbers_that_skip_a_window_end(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "w", os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, record.FILE_SIZE)
    windows = rank_windows._Windows(os.dup(fd), 4)
    for step in (2, 3, 6, 7, 11, 13):  # 2 starts the clock; 6 is past window 1 (1-4), 11 past 2, 13 past 3
        windows.add(step, {"forward": 0.01})
    got = [record.decode(payload) for _, payload in record.read_new(fd, 0)]
    assert [(w.index, w.step, w.steps) for w in got if w] == [(1, 3, 1), (2, 7, 2), (3, 11, 1)]
    os.close(fd)


def test_outside_dslaunch_it_does_nothing(monkeypatch: object) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.delenv(record.ENV_FILE, raising=False)
    monkeypatch.setattr(rank_windows, "_opened", False)
    monkeypatch.setattr(rank_windows, "_state", None)
    rank_windows.add(1, {"forward": 0.1})
    assert rank_windows._state is None
