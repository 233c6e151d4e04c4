"""Warm restarts: with --preload and --max-restarts, the local launcher keeps each node's zygote for the whole
job; a restart forks its ranks from the same process, one that became unsafe is replaced, and nothing of the
job outlives it, also when the launcher is SIGKILLed (dslaunch/agent/preload/warm.py, docs/restarts.md)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers import DSLAUNCH, SCRIPTS, run_cli

JOB = str(SCRIPTS / "warm" / "warm_job.py")
ENGINE = str(SCRIPTS / "engine_ranks.py")
PATH_ENV = {
    "PYTHONPATH": os.pathsep.join(
        p for p in (str(SCRIPTS / "warm"), str(SCRIPTS / "preload"), os.environ.get("PYTHONPATH")) if p
    )
}
LINE = re.compile(r"attempt=(\d) rank=(\d) zygote=(\S+) grandparent=(\d+) pid=(\d+)")
RESTART = ["--max-restarts", "1", "--restart-delay", "0"]


def _launch(*args: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    return run_cli(["--nproc-per-node", str(nproc), "--master-port", "0", *args, JOB], env=PATH_ENV, timeout=90)


def _zygotes(stdout: str) -> dict[tuple[int, int], tuple[str, int]]:
    """(attempt, rank) -> (the zygote pid it was forked from, its waiter's parent)."""
    return {(int(m[1]), int(m[2])): (m[3], int(m[4])) for m in LINE.finditer(stdout)}


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.launch
def test_a_restart_forks_from_the_same_zygote_and_nothing_is_left() -> None:
    result = _launch("--preload", "json", *RESTART, nproc=3)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    assert "the job ran 2 times" in result.stderr, result.stderr
    seen = _zygotes(result.stdout)
    assert sorted(seen) == [(a, r) for a in (0, 1) for r in range(3)], result.stdout
    zygotes = {zygote for zygote, _ in seen.values()}
    assert len(zygotes) == 1 and "-" not in zygotes, seen  # one zygote served both attempts
    zygote = int(zygotes.pop())
    assert {grandparent for _, grandparent in seen.values()} == {zygote}  # rank <- its waiter <- the zygote
    assert _gone(zygote)


@pytest.mark.launch
def test_what_a_warm_rank_leaves_behind_ends_with_its_attempt(tmp_path: Path) -> None:
    """A rank's child in its own session is below the rank's waiter (a subreaper), not the agent: still ended."""
    result = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--preload", "json", *RESTART, JOB],
        env={**PATH_ENV, "DAEMON_DIR": str(tmp_path), "SLEEP": "0.5"},
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    daemons = [int(p.read_text()) for p in tmp_path.glob("daemon*")]
    assert len(daemons) == 4, result.stdout
    assert all(_gone(pid) for pid in daemons)


@pytest.mark.launch
def test_without_restarts_the_agent_keeps_its_own_zygote() -> None:
    result = _launch("--preload", "json")
    assert result.returncode == 3, result.stderr  # rank 1 fails; no warm zygote is started for a single attempt
    assert {zygote for zygote, _ in _zygotes(result.stdout).values()} == {"-"}, result.stdout


@pytest.mark.launch
def test_a_zygote_that_became_unsafe_is_replaced_for_the_next_attempt() -> None:
    """It starts a thread after its first fork: rank 1 is exec'd (and fails), then attempt 1 gets a new zygote."""
    result = _launch("--preload", "preload_late_thread", *RESTART)
    assert result.returncode == 0, result.stderr
    seen = _zygotes(result.stdout)
    assert seen[0, 1][0] == "-" and seen[1, 1][0] == "-", result.stdout  # exec'd in both attempts
    first, second = seen[0, 0][0], seen[1, 0][0]
    assert "-" not in (first, second) and first != second, result.stdout
    assert re.search(
        r"warning: --preload preload_late_thread on \S+: this node's ranks exec'd instead: "
        r"the preloaded process runs 2 threads",
        result.stderr,
    ), result.stderr
    assert re.search(
        r"warning: --preload preload_late_thread on \S+: replaced for this attempt: "
        r"the preloaded process runs 2 threads",
        result.stderr,
    ), result.stderr
    assert _gone(int(first)) and _gone(int(second))


@pytest.mark.launch
def test_a_zygote_that_hangs_when_checked_is_killed_and_replaced() -> None:
    began = time.monotonic()
    result = _launch("--preload", "preload_hangs_on_check", *RESTART)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - began < 40
    seen = _zygotes(result.stdout)
    first, second = seen[0, 0][0], seen[1, 0][0]
    assert "-" not in (first, second) and first != second, result.stdout
    assert re.search(r"replaced for this attempt: the preloaded process did not answer within 5 s", result.stderr)
    assert _gone(int(first)) and _gone(int(second))


@pytest.mark.launch
def test_sigkill_of_the_launcher_during_the_restart_delay_leaves_nothing() -> None:
    argv = ["--nproc-per-node", "2", "--master-port", "0", "--preload", "json", "--max-restarts", "1"]
    env = {**os.environ, **PATH_ENV, "SLEEP": "0"}
    proc = subprocess.Popen(
        [*DSLAUNCH, *argv, "--restart-delay", "60", JOB], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        deadline = time.monotonic() + 60
        line = b""
        while b"restarting every rank" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            assert line, "the launcher ended before its restart delay"
        zygote = psutil.Process(proc.pid).children()
        assert len(zygote) == 1 and "dslaunch.agent.preload.server" in " ".join(
            zygote[0].cmdline()
        )  # kept for attempt 1
        proc.kill()
        proc.wait()
        _, alive = psutil.wait_procs(zygote, timeout=10)
        assert not alive  # its parent-death signal
        assert "zygote=" in proc.stdout.read().decode()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.launch
def test_a_killed_agent_takes_its_warm_ranks_with_it() -> None:
    """A warm rank is its waiter's child, not the agent's: the waiter ends it when the agent is gone."""
    argv = ["--nproc-per-node", "2", "--master-port", "0", "--preload", "json", *RESTART]
    env = {**os.environ, **PATH_ENV, "FAIL_RANK": "9"}
    proc = subprocess.Popen([*DSLAUNCH, *argv, JOB], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        pids = [int(LINE.search(proc.stdout.readline().decode())[5]) for _ in range(2)]  # type: ignore[index]
        agent = next(p for p in psutil.Process(proc.pid).children() if "preload.server" not in " ".join(p.cmdline()))
        assert not agent.children()
        ranks = [psutil.Process(pid) for pid in pids]  # before the kill: a rank may be gone by the time we look
        agent.kill()
        _, alive = psutil.wait_procs(ranks, timeout=10)
        assert not alive
        proc.wait(timeout=60)  # attempt 1 (not killed) runs its 30 s: stop it
    except subprocess.TimeoutExpired:
        pass
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.launch
@pytest.mark.torch
def test_torch_ranks_restart_from_the_zygote_that_imported_torch(tmp_path: Path) -> None:
    script = tmp_path / "torch_restart.py"
    script.write_text(
        "import os, sys\n"
        f"exec(open({ENGINE!r}).read())\n"
        "print('zygote=' + os.environ.get('DSLAUNCH_ZYGOTE_PID', '-'), flush=True)\n"
        "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0':\n"
        "    dist.barrier()  # rank 0 has printed before rank 1's failure tears it down\n"
        "    if engine.rank == 1:\n"
        "        os._exit(3)\n"
    )
    result = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--preload", "torch", *RESTART, str(script)],
        env={"DSLAUNCH_PG_TIMEOUT": "60", "CUDA_VISIBLE_DEVICES": "", "MODE": "engine"},
        timeout=180,
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    assert result.stdout.count("world=2 device=cpu backend=gloo owns=True sum=3 ok=True") == 4, result.stdout
    zygotes = set(re.findall(r"zygote=(\S+)", result.stdout))
    assert len(zygotes) == 1 and "-" not in zygotes, result.stdout
