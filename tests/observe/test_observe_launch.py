"""Seeing a running job, with real launches of non-torch ranks that time regions with dslaunch's timers
(tests/scripts/timed_ranks.py: lock-step, as synchronous training is): the straggler named and recovered, the
breakdown's figures against the ranks' own timings, a real Prometheus server scraping a 2-node job."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH as DSLAUNCH_CMD

pytestmark = pytest.mark.launch
SCRIPT = str(Path(__file__).parents[1] / "scripts" / "timed_ranks.py")
PERIOD = 0.08


def _launch(args: list[str], *rank_args: object, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    t0 = time.time() + 3.0  # every rank starts its steps together
    return subprocess.Popen(
        [*DSLAUNCH_CMD, "--master-port", "0", *args, SCRIPT, f"{t0}", f"{PERIOD}", *map(str, rank_args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def test_rank_5_named_once_as_a_straggler_and_once_recovered() -> None:
    # 8 ranks, 60 steps; rank 5's 'forward' takes 40 ms instead of 20 from step 20 to 39
    t0 = time.time() + 3.0
    job = subprocess.Popen(
        [
            *DSLAUNCH_CMD,
            "--master-port",
            "0",
            "--nproc-per-node",
            "8",
            SCRIPT,
            f"{t0}",
            f"{PERIOD}",
            "60",
            "5",
            "20",
            "40",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert job.stderr is not None
    seen = []
    for line in job.stderr:
        seen.append((time.time(), line.rstrip()))
    assert job.wait(timeout=30) == 0
    named = [(at, line) for at, line in seen if "straggler" in line]
    text = "\n".join(line for _, line in seen)
    assert len(named) == 2, text
    (slow_at, slow), (back_at, back) = named
    assert "straggler: rank 5 (node 0, host localhost) spends " in slow and "in 'forward'" in slow, text
    assert " W " in slow or "WARNING" in slow  # a warning, at the default level
    assert "straggler recovered: rank 5 (node 0, host localhost)" in back, text
    step_named = (slow_at - t0) / PERIOD
    assert 20 < step_named <= 30, f"named at step {step_named:.1f}, slow from step 20"
    assert (back_at - t0) / PERIOD > 40


def test_the_breakdown_matches_the_ranks_own_timings(tmp_path: Path) -> None:
    logs, timings = tmp_path / "logs", tmp_path / "timings"
    timings.mkdir()
    args = ["--nproc-per-node", "4", "--wall-clock-breakdown", "--breakdown-every", "10", "--log-dir", str(logs)]
    job = _launch(args, 25, 2, 1, 99, env={"TIMINGS_DIR": str(timings)})
    _out, err = job.communicate(timeout=30)
    assert job.returncode == 0, err
    assert "dslaunch: wall-clock breakdown, steps 2-10, 4 of 4 ranks (ms per step)" in err  # default log level
    first = json.loads((logs / "breakdown.jsonl").read_text().splitlines()[0])
    assert first["steps"] == [2, 10]
    own = {}
    for rank in range(4):
        rows = [json.loads(line) for line in (timings / f"rank{rank}.jsonl").read_text().splitlines()]
        own[rank] = {k: sum(r["t"][k] for r in rows if 2 <= r["step"] <= 10) / 9 for k in ("forward", "backward")}
    for region in ("forward", "backward"):
        per_rank = sorted((own[r][region], r) for r in own)
        got = first["regions"][region]
        assert got["min"] == pytest.approx(per_rank[0][0], abs=1e-5)
        assert got["median"] == pytest.approx((per_rank[1][0] + per_rank[2][0]) / 2, abs=1e-5)
        assert got["max"] == pytest.approx(per_rank[3][0], abs=1e-5)
        assert got["slowest"]["rank"] == per_rank[3][1]
    assert first["regions"]["forward"]["slowest"] == {"rank": 2, "node": 0, "host": "localhost"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _query(port: int, expr: str) -> list[dict[str, object]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.loads(response.read())
    assert body["status"] == "success"
    return list(body["data"]["result"])


def _value(port: int, expr: str) -> float | None:
    result = _query(port, expr)
    return float(result[0]["value"][1]) if result else None  # type: ignore[index]


def _wait_for_the_first_scrape(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as response:
            targets = json.loads(response.read())["data"]["activeTargets"]
        if targets and not targets[0]["lastScrape"].startswith("0001"):
            return
        time.sleep(0.5)
    pytest.fail("prometheus never scraped its target")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[int, int]]:
    """A real Prometheus on loopback scraping 127.0.0.1:METRICS every second: (its port, the metrics port)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus binary (scripts/install-system-deps.sh installs Debian's)")
    port, metrics = _free_port(), _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"scrape_configs: [{{job_name: dslaunch, static_configs: [{{targets: ['127.0.0.1:{metrics}']}}]}}]\n"
    )
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("prometheus did not start")
                time.sleep(0.3)
        _wait_for_the_first_scrape(port)  # its target discovery sends the first targets after ~5 s
        yield port, metrics
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_prometheus_scrapes_a_running_two_node_job(prometheus: tuple[int, int], tmp_path: Path) -> None:
    port, metrics = prometheus
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n127.0.0.1 slots=2\n")
    # 4 ranks on 2 nodes; rank 3 slow in 'forward' all along; rank 1 fails at step 40 of the first attempt
    args = [
        "--hostfile",
        str(hosts),
        "--launcher",
        "local",
        "--master-port",
        "0",
        "--max-restarts",
        "1",
        "--metrics-port",
        f"127.0.0.1:{metrics}",
    ]
    job = subprocess.Popen(
        [*DSLAUNCH_CMD, *args, SCRIPT, f"{time.time() + 3.0}", "0.1", "70", "3", "1", "999", "1", "40"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    samples = []
    deadline = time.monotonic() + 60
    while job.poll() is None and time.monotonic() < deadline:
        samples.append(
            (
                _value(port, "dslaunch_attempt"),
                _value(port, 'dslaunch_restarts_total{cause="rank_failure"}'),
                _value(port, "dslaunch_step"),
                _value(port, 'dslaunch_slowest_rank{region="forward"}'),
                _value(port, "dslaunch_nodes"),
                _value(port, 'dslaunch_wall_seconds{phase="lost_work"}'),
            )
        )
        time.sleep(1.0)
    _out, err = job.communicate(timeout=30)
    assert job.returncode == 0, err
    restarts = [s[1] or 0 for s in samples]
    assert restarts == sorted(restarts) and restarts[0] == 0 and restarts[-1] == 1, samples  # the counter rose
    first = [s for s in samples if s[0] == 0 and s[1] is None and s[2]]  # attempt 0, stepping
    second = [s for s in samples if s[0] == 1 and s[2]]
    assert first and second and all(s[1] == 1 for s in second), "\n".join(map(str, samples))
    for attempt in (first, second):
        steps = [s[2] for s in attempt]
        assert steps == sorted(steps) and steps[-1] > steps[0], samples  # steps advance
    assert {s[3] for s in first + second} == {3.0}, samples  # the rank the test slowed down
    assert {s[4] for s in samples if s[4] is not None} == {2.0}
    # attempt 0's ~40 steps of 0.1 s were lost to the restart (the script keeps no checkpoint)
    assert all(s[5] == 0 for s in first) and all(3.0 < s[5] < 8.0 for s in second), samples


def test_in_pods_the_coordinator_names_a_straggler_of_another_pod() -> None:
    from tests.pods.pods import free_port_pair

    port, t0 = free_port_pair(), time.time() + 3.0
    pods = []
    for node_rank in (0, 1):
        env = {
            **os.environ,
            **{"PET_NNODES": "2", "PET_NODE_RANK": str(node_rank), "PET_NPROC_PER_NODE": "2"},
            **{"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""},
        }
        # rank 3 (the second pod's) twice as slow in 'forward' from step 10 on
        command = [*DSLAUNCH_CMD, SCRIPT, f"{t0}", f"{PERIOD}", "40", "3", "10", "999"]
        pods.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    errs = [p.communicate(timeout=60)[1] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], errs
    named = [line for line in errs[0].splitlines() if "straggler" in line]
    assert len(named) == 1 and "straggler: rank 3 (node 1, host " in named[0], errs[0]
    assert "straggler" not in errs[1]  # the member leaves it to the coordinator: one line for the job


def test_in_pods_the_coordinators_restarts_counter_names_a_ranks_failure(tmp_path: Path) -> None:
    """The coordinator decides its pods' restarts itself (pods/pod_launcher.py) and hands run_attempts no
    failures: the counter's cause comes with its result. Rank 3, the second pod's, fails at step 10 of attempt 0."""
    from tests.pods.pods import free_port_pair

    port, t0 = free_port_pair(), time.time() + 3.0
    metrics = tmp_path / "coordinator.prom"
    pods = []
    for node_rank in (0, 1):
        env = {
            **os.environ,
            **{"PET_NNODES": "2", "PET_NODE_RANK": str(node_rank), "PET_NPROC_PER_NODE": "2"},
            **{"PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port), "CUDA_VISIBLE_DEVICES": ""},
            "PET_MAX_RESTARTS": "1",
        }
        extra = ["--metrics-file", str(metrics)] if node_rank == 0 else []
        command = [*DSLAUNCH_CMD, "--restart-delay", "0", *extra, SCRIPT, f"{t0}", f"{PERIOD}", "20", "-1", "0", "0"]
        command += ["3", "10"]
        pods.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env))
    errs = [p.communicate(timeout=90)[1] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], errs
    lines = set(metrics.read_text().splitlines())
    assert 'dslaunch_restarts_total{cause="rank_failure"} 1.0' in lines, sorted(lines)
    assert 'dslaunch_job_state{state="succeeded"} 1.0' in lines, sorted(lines)
    lost = next(line for line in lines if line.startswith('dslaunch_wall_seconds{phase="lost_work"}'))
    assert float(lost.split()[-1]) > 0.3, lost  # attempt 0's 9 steps of 0.08 s
