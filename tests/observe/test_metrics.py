"""The metrics as Prometheus reads them: /metrics over HTTP from the official client, bounded labels."""

from __future__ import annotations

import socket
import urllib.request

from dslaunch.observe import breakdown as bd
from dslaunch.observe.figures import JobFigures
from dslaunch.observe.metrics import Exporter
from dslaunch.observe.settings import ObserveSettings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_over_http() -> None:
    figures = JobFigures(started=1000.0, state="running", attempt=1, restarts={"rank_failure": 1}, ranks=4, nodes=2)
    figures.ranks_alive, figures.step, figures.step_rate, figures.first_step_at = 4, 120, 9.5, 1012.5
    figures.regions = (bd.RegionStats("forward", 4, 0.02, 0.021, 0.04, 3, 1, "h1"),)
    port = _free_port()
    exporter = Exporter(ObserveSettings(metrics_port=port, metrics_addr="127.0.0.1"), figures)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    finally:
        exporter.close()
    lines = set(text.splitlines())
    for line in [
        'dslaunch_job_state{state="running"} 1.0',
        'dslaunch_job_state{state="failed"} 0.0',
        "dslaunch_attempt 1.0",
        'dslaunch_restarts_total{cause="rank_failure"} 1.0',
        "dslaunch_ranks_alive 4.0",
        "dslaunch_nodes_alive 2.0",
        "dslaunch_step 120.0",
        "dslaunch_step_rate 9.5",
        "dslaunch_time_to_first_step_seconds 12.5",
        'dslaunch_region_seconds{quantile="1",region="forward"} 0.04',
        'dslaunch_slowest_rank{region="forward"} 3.0',
        'dslaunch_wall_seconds{phase="lost_work"} 0.0',
    ]:
        assert line in lines, line
    names = {line.split("{")[0].split()[0] for line in lines if line and not line.startswith("#")}
    assert all(name.startswith("dslaunch_") for name in names)
    assert not any("rank=" in line or "host=" in line for line in lines)  # no label per rank or host
