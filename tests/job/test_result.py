"""The restarts counter's cause of an attempt (job/result.py, pure)."""

from __future__ import annotations

import pytest

from dslaunch.job.result import restart_cause


@pytest.mark.parametrize(
    ("code", "lost", "ranks", "cause"),
    [
        (1, True, True, "node_lost"),
        (1, False, True, "rank_failure"),
        (124, False, False, "hang"),
        (143, False, False, "other"),
    ],
)
def test_restart_cause(code: int, lost: bool, ranks: bool, cause: str) -> None:
    assert restart_cause(code, lost=lost, ranks=ranks) == cause
