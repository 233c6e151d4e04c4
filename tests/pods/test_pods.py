"""One job across pods (issue 30): one dslaunch per "pod" on loopback, configured by PET_* alone, joined by the
pods' control channel. A rank failing or a pod lost on one side stops every rank on both, at once, with the
same root cause and exit code on both."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, wait_for_file
from tests.pods.pods import JOB, PodController, finish, free_port_pair, nothing_left, pod_env, start_pod

pytestmark = [pytest.mark.launch]


def _ready(folder: Path, world: int = 4) -> bool:
    return all(wait_for_file(str(folder / f"ready.{r}"), 30) for r in range(world))


def _two_pods(tmp_path: Path, run_id: str, args: list[str]) -> list[subprocess.Popen[str]]:
    port = free_port_pair()
    return [start_pod(pod_env(r, port, run_id), args, cwd=tmp_path) for r in (0, 1)]


def test_a_rank_failing_on_one_pod_stops_both_with_its_code_and_cause(tmp_path: Path) -> None:
    run_id = f"podfail{os.getpid()}"
    pods = _two_pods(tmp_path, run_id, [JOB, "fail", str(tmp_path), "3", "7"])
    (code0, _, err0), (code1, _, err1) = finish(pods)
    assert (code0, code1) == (7, 7), (err0, err1)
    for err in (err0, err1):  # the coordinator's summary names the other pod's rank too
        assert "rank 3 (local_rank 1, node 1)" in err and "exited with code 7 [root cause" in err, err
        assert "rank 3 failing now" in err
    assert nothing_left(run_id) == []


@pytest.mark.parametrize(
    ("victim", "sig", "codes", "said"),
    [
        (1, signal.SIGKILL, (137, -9), "pod 1 (vm) was lost: its launcher's connection dropped"),
        (1, signal.SIGTERM, (143, 143), "dslaunch: stopped by SIGTERM (exit 143)"),
        (0, signal.SIGKILL, (-9, 137), "pod 0 (vm) was lost: the coordinator's connection dropped"),
        (0, signal.SIGTERM, (143, 143), "dslaunch: stopped by SIGTERM (exit 143)"),
    ],
)
def test_a_pod_taken_away_stops_the_other_within_3_s(
    tmp_path: Path, victim: int, sig: int, codes: tuple[int | None, int | None], said: str
) -> None:
    """SIGKILL: the pod deleted at once (its launcher and, by their parent-death signal, its ranks; the killed one's
    -9 is its container's 137), the other exits 137 too, a lost pod's code; SIGTERM:
    ``kubectl delete``, a requested stop: every pod's ranks are asked to stop, every pod exits 143."""
    run_id = f"podgone{victim}{sig}{os.getpid()}"
    pods = _two_pods(tmp_path, run_id, [JOB, "sleep", str(tmp_path)])
    assert _ready(tmp_path), finish(pods, 5)
    pods[victim].send_signal(sig)
    taken = time.monotonic()
    other = pods[1 - victim]
    other.wait(10)
    took = time.monotonic() - taken
    results = finish(pods)
    survivor_err = results[1 - victim][2]
    assert took < 3, f"the other pod took {took:.1f} s to stop"
    assert [r[0] for r in results][1 - victim] == codes[1 - victim], survivor_err
    if codes[victim] is not None:
        assert results[victim][0] == codes[victim], results[victim][2]
    assert said.replace("vm", os.uname().nodename) in survivor_err, survivor_err
    assert nothing_left(run_id) == []


def test_a_pod_without_the_secret_is_turned_away_and_the_job_does_not_start(tmp_path: Path) -> None:
    run_id = f"podsecret{os.getpid()}"
    port = free_port_pair()
    short = "join_timeout=3"
    coordinator = start_pod(pod_env(0, port, run_id, PET_RDZV_CONF=short), [JOB, "echo"], cwd=tmp_path)
    stranger = start_pod(
        pod_env(1, port, run_id, PET_RDZV_CONF=short, DSLAUNCH_JOB_SECRET="guess"), [JOB, "echo"], cwd=tmp_path
    )
    (code0, out0, err0), (code1, out1, err1) = finish([coordinator, stranger])
    assert (code0, code1) == (255, 255), (err0, err1)
    assert "node(s) 1 did not join in time (--rdzv-conf join_timeout=3)" in err0, err0
    assert "this pod does not hold the job's secret" in err1, err1
    assert '"rank"' not in out0 + out1  # no rank ran
    assert nothing_left(run_id) == []


@pytest.mark.parametrize("victim", [1, 0])
def test_restarts_are_the_jobs_and_a_recreated_pod_joins_the_next_attempt(tmp_path: Path, victim: int) -> None:
    """A pod is deleted while the first attempt runs; a pod controller recreates it, as a pod restart policy
    would; it joins attempt 1 (TORCHELASTIC_RESTART_COUNT=1 on every rank, also on the new pod). The deleted pod
    may be the coordinator's: the other waits for it (join timeout), and the new one goes on counting."""
    run_id = f"podback{victim}{os.getpid()}"
    port = free_port_pair()
    args = ["--max-restarts", "2", "--restart-delay", "0", str(SCRIPTS / "pod_attempts.py"), str(tmp_path)]
    controller = PodController([(pod_env(r, port, run_id), args) for r in (0, 1)], tmp_path)
    assert _ready(tmp_path), controller.finish(5)
    controller.delete(victim)
    (code0, _, err0), (code1, _, err1) = controller.finish()
    assert (code0, code1) == (0, 0), (err0, err1)
    attempts = sorted((tmp_path / "attempts.txt").read_text().split("\n")[:-1])
    assert attempts == [f"{a} {r} 4" for a in (0, 1) for r in range(4)], attempts
    survivor = err1 if victim == 0 else err0
    assert f"attempt 1: exit 137: node {victim} ({os.uname().nodename}) disappeared" in survivor, survivor
    assert nothing_left(run_id) == []


@pytest.mark.parametrize(
    ("options", "mode", "codes", "attempts", "said"),
    [
        (["--max-restarts", "5"], ["import"], (1, 1), [0, 1], "failed the same way in attempts 1 and 2, within 300"),
        (["--max-restarts", "5", "--no-restart-on", "3"], ["exit", "3"], (3, 3), [0], "which --no-restart-on lists"),
        (["--max-restarts", "2"], ["flaky"], (0, 0), [0, 1, 2], None),
        # a script without beats failing the same way 2 s in: past --repeat-window 0.5, every restart; within 60, not
        (["--max-restarts", "2", "--repeat-window", "0.5"], ["late", "2"], (0, 0), [0, 1, 2], None),
        (["--max-restarts", "5", "--repeat-window", "60"], ["late", "2"], (1, 1), [0, 1], "within 60 s of their"),
    ],
)
def test_the_coordinator_decides_restarts_for_every_pod(
    tmp_path: Path, options: list[str], mode: list[str], codes: tuple[int, int], attempts: list[int], said: str | None
) -> None:
    """Rank 1 (pod 0) fails before any step: the same way twice ends the job on both pods after attempt 2 (for a
    script without beats, only within --repeat-window), a --no-restart-on code after attempt 1; a different failure
    each time, or the same one past the window, gets every restart."""
    run_id = f"podrules{mode[0]}{options[-1]}{os.getpid()}"
    script = [str(SCRIPTS / "repeat_fail.py"), str(tmp_path), *mode]
    pods = _two_pods(tmp_path, run_id, ["--restart-delay", "0", *options, *script])
    (code0, _, err0), (code1, _, err1) = finish(pods)
    assert (code0, code1) == codes, (err0, err1)
    seen = sorted({int(line.split()[0]) for line in (tmp_path / "attempts.txt").read_text().splitlines()})
    assert seen == attempts, (err0, err1)
    if said is None:
        assert "not restarting" not in err0 + err1
    else:
        assert f"dslaunch: not restarting: rank 1 on {os.uname().nodename}" in err0 and said in err0, err0
    assert nothing_left(run_id) == []


@pytest.mark.parametrize("preload", [[], ["--preload", "json", "--max-restarts", "1"]])
def test_no_rank_inherits_the_secret(tmp_path: Path, preload: list[str]) -> None:
    """The launcher takes the secret out of its environment before anything starts, a warm zygote included
    (whose environment block a forked rank shows in /proc)."""
    run_id = f"podkeep{len(preload)}{os.getpid()}"
    pods = _two_pods(tmp_path, run_id, [*preload, str(SCRIPTS / "environ_has.py"), "DSLAUNCH_JOB_SECRET"])
    results = finish(pods)
    assert [code for code, _, _ in results] == [0, 0], [err for _, _, err in results]
    ranks = [json.loads(line.split("]: ", 1)[1]) for _, out, _ in results for line in out.splitlines()]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3]
    assert not any(r["os"] or r["proc"] for r in ranks), ranks


def test_a_hang_across_pods_is_declared_once_with_every_pods_stacks(tmp_path: Path) -> None:
    """--hang-timeout: the coordinator's watch sees every pod's ranks; each pod prints its ranks' stacks; every
    pod ends with 124, the other pod with the coordinator's words for the hang."""
    run_id = f"podhang{os.getpid()}"
    script = [str(SCRIPTS / "waiter.py"), "silent", "1,1,1,1", str(tmp_path)]
    pods = _two_pods(tmp_path, run_id, ["--hang-timeout", "2", *script])
    (code0, _, err0), (code1, _, err1) = finish(pods)
    assert (code0, code1) == (124, 124), (err0, err1)
    assert "no rank made progress for 2 s; least progress: rank 0" in err0, err0
    assert "job failed on every pod (exit 124): hang: no progress for 2 s" in err1, err1
    for rank, text in ((0, err0), (1, err0), (2, err1), (3, err1)):
        assert f"[{os.uname().nodename}:rank{rank}]:   File" in text and "in stuck_here" in text, text
    assert nothing_left(run_id) == []


@pytest.mark.parametrize("victim", [0, 1])
def test_sigterm_to_one_pod_stops_every_pods_ranks_and_each_saves_and_every_pod_exits_143(
    tmp_path: Path, victim: int
) -> None:
    """``kubectl delete`` of one pod (or its eviction): the request reaches every pod, each rank's own handler
    finishes its step and saves while its DataLoader-like workers live, and every pod exits 143 for the
    platform's restart policy."""
    run_id = f"podstop{victim}{os.getpid()}"
    pods = _two_pods(tmp_path, run_id, ["--stop-grace", "10", str(SCRIPTS / "stop_saver.py"), str(tmp_path)])
    assert all(wait_for_file(str(tmp_path / f"rank{r}.ready"), 30) for r in range(4)), finish(pods, 5)
    time.sleep(0.2)
    pods[victim].send_signal(signal.SIGTERM)
    results = finish(pods, 30)
    saved = [(tmp_path / f"rank{r}.saved").exists() for r in range(4)]
    assert saved == [True] * 4, results
    assert [code for code, _out, _err in results] == [143, 143], results
    # the coordinator counts the job's ranks, the other pod its own (failures alone are relayed: pods/attempt.py)
    for (_code, _out, err), counted in zip(results, ("4 of 4", "2 of 2"), strict=True):
        assert f"dslaunch: stopped by SIGTERM (exit 143); {counted} ranks exited 0 within" in err, err
    assert nothing_left(run_id) == []
