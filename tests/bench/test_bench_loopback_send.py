"""The loopback send benchmark (bench/bench_loopback_send.py) at a small size, so it cannot rot: every line it
sends is read back and its MAC checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.launch]
ROOT = Path(__file__).resolve().parents[2]


def test_every_sealed_line_is_read_back_and_checked() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_loopback_send", "--connections", "50", "--rounds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "100 of 100 checked" in done.stdout, done.stdout
    assert "us system a line" in done.stdout, done.stdout
