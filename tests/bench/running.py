"""A benchmark run as its command line runs it (``python -m bench.NAME``), from the repository root, its output
kept: the smoke tests under tests/bench check it at a small size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
