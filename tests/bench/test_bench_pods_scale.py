"""The pods-at-scale simulator (bench/bench_pods_scale.py) at a small size, so it cannot rot: 16 pods against a real
coordinator, every scenario, each simulated pod checking what it reads with the pods' own decoder (``--check``);
Slurm's stop channel across 32 tasks and the dial-back of 32 agents under a flood of 64. The figures themselves
are the benchmark's (docs/scale.md): here only that each is reached, and agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dslaunch.channel.link import SILENT
from tests.bench.running import run_bench

pytestmark = [pytest.mark.launch]


def test_the_simulator_runs_every_scenario_against_a_real_coordinator(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    args = ["--pods", "16", "--runs", "1", "--settle", "0.5", "--quiet-window", "1", "--check", "--fresh"]
    args += ["--slurm-tasks", "32", "--dial-agents", "32", "--flood", "64", "--results", str(results)]
    done = run_bench("bench_pods_scale", *args, timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    saved = json.loads(results.read_text())
    (pods,) = saved["pods"]["16"]
    assert pods["notes"] == [] and pods["standby_notes"] == [], pods
    assert pods["joined"] == 15 and pods["tries"] >= 15 and pods["joined_s"] is not None
    assert pods["threads"] > 0 and pods["rss_mb"] > 0 and pods["quiet_cpu_pct"] >= 0
    assert pods["drop_told"] == 14 and pods["drop_told_s"] < SILENT, pods  # a closed connection: no silence waited for
    assert pods["silent_told"] == 14 and SILENT - 0.5 < pods["silent_told_s"] < SILENT + 10, pods
    assert pods["drop_restart_s"] is not None and pods["silent_restart_s"] is not None
    assert pods["coordinator_restart_s"] is not None
    assert pods["stop_agreed"] == 15 and pods["stop_step_ok"] is True and pods["coordinator_exit"] == 143
    assert pods["standby_joined"] == 15 and pods["standby_s"] is not None
    assert pods["real_started"] == 15 and pods["real_outcomes"] == {}, pods  # the real client, the same way
    (slurm,) = saved["slurm"]["32"]
    assert slurm["connected"] == 31 and slurm["agreed"] == 31 and slurm["step_ok"] is True, slurm
    (dial,) = saved["dialback"]["32"]
    assert dial["joined"] == 32 and dial["listener_joined"] == 32 and dial["flood_connections"] >= 64, dial
    assert "| 16 |" in done.stdout


def test_churn_swaps_standbys_in_and_the_coordinator_stays_flat(tmp_path: Path) -> None:
    """Running pods lost in turn, a standby in place each time: the coordinator's threads and open files after the
    last swap are those after the first (a thread a launcher line grew them by about four a swap: output/sink.py)."""
    results = tmp_path / "results.json"
    args = ["--pods", "16", "--runs", "1", "--scenarios", "churn", "--churn-cycles", "8", "--fresh"]
    done = run_bench("bench_pods_scale", *args, "--results", str(results), timeout=150)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (churn,) = json.loads(results.read_text())["churn"]["16"]
    assert churn["churn_notes"] == [] and churn["churn_swaps"] == 8, churn
    (_rss0, threads0, files0), (_rss, threads, files) = churn["churn_first"], churn["churn_last"]
    assert threads <= threads0 + 1 and files <= files0 + 1, churn  # one writer or connection may be on its way out
    assert "running pods lost in turn" in done.stdout
