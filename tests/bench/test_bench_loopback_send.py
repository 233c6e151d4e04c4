"""The loopback send benchmark (bench/bench_loopback_send.py) at a small size, so it cannot rot: every line it
sends is read back and its MAC checked."""

from __future__ import annotations

import pytest

from tests.bench.running import run_bench

pytestmark = [pytest.mark.launch]


def test_every_sealed_line_is_read_back_and_checked() -> None:
    done = run_bench("bench_loopback_send", "--connections", "50", "--rounds", "2", timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "100 of 100 checked" in done.stdout, done.stdout
    assert "us system a line" in done.stdout, done.stdout
