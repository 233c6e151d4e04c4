"""Elastic pod jobs (torchrun's c10d shape: ``--nnodes MIN:MAX``, or N with c10d and no node rank): the coordinator
gives the node ranks, lays every attempt out again, and keeps the pods beyond MAX as standbys that take a lost
pod's place (issue 30, items 4 and 5). Pods on loopback; the first to take the endpoint's port coordinates."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, wait_for_file
from tests.pods.pods import JOB, elastic_env, finish, free_port_pair, nothing_left, start_pod

pytestmark = [pytest.mark.launch]
ATTEMPTS = str(SCRIPTS / "pod_attempts.py")


def _pods(count: int, env: dict[str, str], args: list[str], cwd: Path) -> list[subprocess.Popen[str]]:
    pods = []
    for _ in range(count):  # in order: the first coordinates, the last of too many stands by
        pods.append(start_pod(env, args, cwd=cwd))
        time.sleep(0.3)
    return pods


def _pod_of_rank(pods: list[subprocess.Popen[str]], folder: Path, rank: int) -> int:
    """Which pod runs ``rank`` (its ready file holds the rank's pid; a pod is that pid's launcher ancestor): the
    pods join first come, first served, so under load the order they were started in says nothing."""
    import psutil

    pid = int((folder / f"ready.{rank}").read_text())
    ancestors = {p.pid for p in psutil.Process(pid).parents()}
    return next(i for i, pod in enumerate(pods) if pod.pid in ancestors)


def _standby(pods: list[subprocess.Popen[str]], folder: Path, world: int) -> int:
    running = {_pod_of_rank(pods, folder, r) for r in range(world)}
    return next(i for i in range(len(pods)) if i not in running)


def _first_line(pod: subprocess.Popen[str], timeout: float) -> str:
    """The first line a pod writes on stderr, waited for up to ``timeout`` seconds ("" if none)."""
    assert pod.stderr is not None
    ready, _, _ = select.select([pod.stderr], [], [], timeout)
    return pod.stderr.readline() if ready else ""


def _attempts(folder: Path) -> list[str]:
    return sorted((folder / "attempts.txt").read_text().split("\n")[:-1])


def test_a_range_loses_a_pod_and_goes_on_smaller(tmp_path: Path) -> None:
    run_id = f"elastic{os.getpid()}"
    env = elastic_env(free_port_pair(), run_id, "2:3")
    pods = _pods(3, env, ["--max-restarts", "1", "--restart-delay", "0", ATTEMPTS, str(tmp_path)], tmp_path)
    assert all(wait_for_file(str(tmp_path / f"ready.{r}"), 30) for r in range(6)), finish(pods, 5)
    coordinator, lost = _pod_of_rank(pods, tmp_path, 0), _pod_of_rank(pods, tmp_path, 4)
    os.killpg(pods[lost].pid, signal.SIGKILL)
    results = finish(pods)
    assert [code for i, (code, _, _) in enumerate(results) if i != lost] == [0, 0], [err for _, _, err in results]
    assert _attempts(tmp_path) == [f"0 {r} 6" for r in range(6)] + [f"1 {r} 4" for r in range(4)]
    assert "attempt 2 runs on 2 pods (4 ranks)" in results[coordinator][2], results[coordinator][2]
    assert nothing_left(run_id) == []


def test_a_standby_takes_a_lost_pods_place_and_the_world_stays(tmp_path: Path) -> None:
    run_id = f"standby{os.getpid()}"
    env = elastic_env(free_port_pair(), run_id, "2")
    pods = _pods(3, env, ["--max-restarts", "1", "--restart-delay", "0", ATTEMPTS, str(tmp_path)], tmp_path)
    assert all(wait_for_file(str(tmp_path / f"ready.{r}"), 30) for r in range(4)), finish(pods, 5)
    standby, lost = _standby(pods, tmp_path, 4), _pod_of_rank(pods, tmp_path, 2)
    said = _first_line(pods[standby], 30)
    assert "this pod stands by: attempt 1 runs on 2 pods" in said, (said, finish(pods, 5))
    os.killpg(pods[lost].pid, signal.SIGKILL)
    results = finish(pods)
    assert [code for i, (code, _, _) in enumerate(results) if i != lost] == [0, 0], [err for _, _, err in results]
    assert _attempts(tmp_path) == [f"{a} {r} 4" for a in (0, 1) for r in range(4)]
    assert nothing_left(run_id) == []


def test_standbys_exit_with_the_job(tmp_path: Path) -> None:
    run_id = f"spare{os.getpid()}"
    env = elastic_env(free_port_pair(), run_id, "2")
    pods = _pods(3, env, [str(SCRIPTS / "until_file.py"), str(tmp_path / "go")], tmp_path)
    deadline = time.monotonic() + 30
    said = ""
    while "this pod stands by" not in said and time.monotonic() < deadline:  # whichever pod came last
        said = next((line for pod in pods if (line := _first_line(pod, 0.1))), said)
    assert "this pod stands by" in said, (said, finish(pods, 5))
    (tmp_path / "go").touch()
    results = finish(pods)
    assert [code for code, _, _ in results] == [0, 0, 0], [err for _, _, err in results]
    assert nothing_left(run_id) == []


def test_a_mesh_that_cannot_fit_the_pods_stops_every_pod_before_any_rank_starts(tmp_path: Path) -> None:
    run_id = f"elmesh{os.getpid()}"
    env = elastic_env(free_port_pair(), run_id, "2:3", DSLAUNCH_MESH="tp=4")
    results = finish(_pods(3, env, [JOB, "echo"], tmp_path))
    assert [code for code, _, _ in results] == [255, 255, 255], [err for _, _, err in results]
    assert all("tp=4" in err and "6 ranks" in err for _, _, err in results), [err for _, _, err in results]
    assert not any('"rank"' in out for _, out, _ in results)
    assert nothing_left(run_id) == []


def test_the_coordinators_pod_lost_a_survivor_and_a_standby_go_on(tmp_path: Path) -> None:
    """On loopback every pod is on the endpoint's host: when the coordinator's pod goes, the survivor and the
    standby race for the port; one coordinates the next attempt, the other joins it (world size unchanged)."""
    run_id = f"elcoord{os.getpid()}"
    env = elastic_env(free_port_pair(), run_id, "2")
    pods = _pods(3, env, ["--max-restarts", "1", "--restart-delay", "0", ATTEMPTS, str(tmp_path)], tmp_path)
    assert all(wait_for_file(str(tmp_path / f"ready.{r}"), 30) for r in range(4)), finish(pods, 5)
    standby, coordinator = _standby(pods, tmp_path, 4), _pod_of_rank(pods, tmp_path, 0)
    said = _first_line(pods[standby], 30)
    assert "this pod stands by" in said, (said, finish(pods, 5))
    os.killpg(pods[coordinator].pid, signal.SIGKILL)
    results = finish(pods)
    assert [code for i, (code, _, _) in enumerate(results) if i != coordinator] == [0, 0], results
    assert _attempts(tmp_path) == [f"{a} {r} 4" for a in (0, 1) for r in range(4)]
    assert nothing_left(run_id) == []
