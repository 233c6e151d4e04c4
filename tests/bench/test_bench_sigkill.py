"""The SIGKILL benchmark (bench/bench_sigkill.py) at one round of the local runner, so it cannot rot: a job whose
every rank leaves a ``setsid`` daemon, its launcher SIGKILLed once every rank is ready, and nothing with the run id
left. The times themselves are the benchmark's (docs/teardown.md); ssh and pdsh (a minute here) are
tests/agent/test_sweep.py's."""

from __future__ import annotations

import re

import pytest

from tests.bench.running import run_bench

pytestmark = [pytest.mark.launch]


def test_a_sigkilled_launcher_leaves_nothing() -> None:
    done = run_bench("bench_sigkill", "--rounds", "1", "--runners", "local", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = dict(re.findall(r"^\| (local|ssh|pdsh) \|(.*)$", done.stdout, re.MULTILINE))
    assert sorted(rows) == ["local"], done.stdout
    for runner, row in rows.items():
        cells = [cell.strip() for cell in row.split("|") if cell.strip()]
        assert cells[-1] == "0 of 1", f"{runner}: {row}"  # nothing left at 10 s
        assert float(cells[0].removesuffix(" s")) < 10, f"{runner}: {row}"
