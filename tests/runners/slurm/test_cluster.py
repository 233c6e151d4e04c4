"""Real Slurm: srun/salloc/sbatch against the private cluster (n1, n2 in the default partition, on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.helpers import SCRIPTS, wait_for_file, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

ROOT = Path(__file__).parents[3]
SCRIPT = str(SCRIPTS / "show_env.py")
DSLAUNCH = [sys.executable, "-m", "dslaunch"]
LIMIT = 90  # seconds, for the `timeout` around every srun/salloc/sbatch


def _run(
    argv: list[str], env: dict[str, str], extra: dict[str, str] | None = None, limit: int = LIMIT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["timeout", "-k", "5", str(limit), *argv],
        capture_output=True,
        text=True,
        env={**env, **(extra or {})},
        cwd=ROOT,
        timeout=limit + 15,
    )


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    """``argv`` running in the background under the same ``timeout`` as ``_run``, its output captured."""
    return subprocess.Popen(
        ["timeout", "-k", "5", str(LIMIT), *argv],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _facts(stdout: str) -> list[dict]:  # type: ignore[type-arg]
    facts = [json.loads(line.split("FACTS ", 1)[1]) for line in stdout.splitlines() if "FACTS " in line]
    return sorted(facts, key=lambda f: int(f["RANK"]))


def _run_id() -> str:
    return "slurmtest-" + uuid.uuid4().hex[:8]


def test_one_task_per_node_starts_the_ranks_with_the_right_env(slurm_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "ds.json"
    config.write_text("{}")
    run_id = _run_id()
    res = _run(
        [
            "srun",
            "-N2",
            "--ntasks-per-node=1",
            *DSLAUNCH,
            "--nproc-per-node",
            "2",
            "--master-port",
            "0",
            "--run-id",
            run_id,
            "--config",
            str(config),
            "--log-level",
            "info",
            "--mesh",
            "dp_shard=2,tp=2",
            SCRIPT,
            "x",
            "$(id)",
        ],
        slurm_env,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    facts = _facts(res.stdout)
    assert [f["RANK"] for f in facts] == ["0", "1", "2", "3"]
    assert [(f["LOCAL_RANK"], f["NODE_RANK"], f["DSLAUNCH_HOST"]) for f in facts] == [
        ("0", "0", "n1"),
        ("1", "0", "n1"),
        ("0", "1", "n2"),
        ("1", "1", "n2"),
    ]
    for f in facts:
        assert (f["WORLD_SIZE"], f["LOCAL_WORLD_SIZE"]) == ("4", "2")
        assert f["MASTER_ADDR"] == "127.0.0.1"  # n1 does not resolve: its NodeAddr from scontrol
        assert f["MASTER_PORT"] == facts[0]["MASTER_PORT"] and 20000 <= int(f["MASTER_PORT"]) < 32000
        assert (f["DSLAUNCH_RUN_ID"], f["DSLAUNCH_CONFIG"], f["DSLAUNCH_LOG_LEVEL"]) == (run_id, str(config), "info")
        assert f["DSLAUNCH_MESH"] == "dp_shard=2,tp=2"
        assert (f["TORCHELASTIC_RUN_ID"], f["ROLE_NAME"], f["ROLE_RANK"]) == (run_id, "default", f["RANK"])
        assert f["TORCHELASTIC_ERROR_FILE"].endswith(f"rank{f['RANK']}.error.json")  # the node agent's file
        assert f["argv"] == ["x", "$(id)"]
    assert "[n2:rank3]: FACTS" in res.stdout


def test_one_task_per_rank_becomes_the_rank(slurm_env: dict[str, str]) -> None:
    res = _run(["srun", "-N2", "--ntasks-per-node=2", *DSLAUNCH, "--master-port", "0", SCRIPT], slurm_env)
    assert res.returncode == 0, res.stdout + res.stderr
    facts = _facts(res.stdout)
    assert [f["RANK"] for f in facts] == ["0", "1", "2", "3"]
    for f in facts:
        assert f["RANK"] == f["SLURM_PROCID"] and (f["WORLD_SIZE"], f["LOCAL_WORLD_SIZE"]) == ("4", "2")
        assert str(f["pid"]) == f["SLURM_TASK_PID"]  # the srun task itself is the rank: nothing else spawned
        assert (f["ROLE_RANK"], f["TORCHELASTIC_RUN_ID"]) == (f["RANK"], f["DSLAUNCH_RUN_ID"])
        assert f["TORCHELASTIC_ERROR_FILE"] == ""  # no agent reads one without --log-dir; "" as torchrun's
    assert [f["NODE_RANK"] for f in facts] == ["0", "0", "1", "1"]

    cyclic = _run(["srun", "-N2", "--ntasks-per-node=2", "--distribution=cyclic", *DSLAUNCH, SCRIPT], slurm_env)
    assert cyclic.returncode == 0, cyclic.stdout + cyclic.stderr
    facts = _facts(cyclic.stdout)
    assert [(f["RANK"], f["SLURM_PROCID"], f["DSLAUNCH_HOST"], f["LOCAL_RANK"]) for f in facts] == [
        ("0", "0", "n1", "0"),
        ("1", "1", "n2", "0"),
        ("2", "2", "n1", "1"),
        ("3", "3", "n2", "1"),
    ]


def test_double_spawn_is_refused(slurm_env: dict[str, str]) -> None:
    res = _run(["srun", "-N2", "--ntasks-per-node=2", *DSLAUNCH, "--nproc-per-node", "2", SCRIPT], slurm_env)
    assert res.returncode == 2
    assert "double spawn" in res.stderr and "srun --ntasks-per-node=1 dslaunch --nproc-per-node 2" in res.stderr
    assert "FACTS" not in res.stdout


def test_a_failing_rank_ends_the_step_with_its_code(slurm_env: dict[str, str]) -> None:
    run_id = _run_id()
    start = time.monotonic()
    res = _run(
        ["srun", "-N2", "--ntasks-per-node=1", *DSLAUNCH, "--nproc-per-node", "2", "--run-id", run_id, SCRIPT],
        slurm_env,
        {"FAIL_RANK": "3", "FAIL_CODE": "7", "FAIL_AFTER": "1", "SLEEP": "120"},
    )
    took = time.monotonic() - start
    assert res.returncode == 7, res.stdout + res.stderr
    assert took < 30
    assert "rank 3 (local_rank 1, node 1) on host n2 exited with code 7" in res.stderr
    assert "another node of the Slurm step failed" in res.stderr
    assert wait_until_gone(run_id, 10) == []


def test_usr1_reaches_every_rank_once_and_scancel_leaves_nothing(slurm_env: dict[str, str], tmp_path: Path) -> None:
    run_id, name = _run_id(), f"dsl-{uuid.uuid4().hex[:6]}"
    srun = _start(
        [
            "srun",
            f"--job-name={name}",
            "-N2",
            "--ntasks-per-node=1",
            *DSLAUNCH,
            "--nproc-per-node",
            "2",
            "--run-id",
            run_id,
            SCRIPT,
        ],
        {**slurm_env, "OUT_DIR": str(tmp_path), "SLEEP": "120"},
    )
    try:
        for rank in range(4):
            assert wait_for_file(str(tmp_path / f"rank{rank}.ready"), 60), f"rank {rank} never started"
        job = subprocess.run(
            ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, env=slurm_env, timeout=10
        ).stdout.strip()
        assert job.isdigit()
        subprocess.run(["scancel", "--signal=USR1", f"{job}.0"], env=slurm_env, timeout=10, check=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not all((tmp_path / f"rank{r}.signals").exists() for r in range(4)):
            time.sleep(0.1)
        time.sleep(1.0)  # a relayed duplicate would arrive by now
        for rank in range(4):
            assert (tmp_path / f"rank{rank}.signals").read_text().split() == ["SIGUSR1"]
        subprocess.run(["scancel", job], env=slurm_env, timeout=10, check=True)
        srun.communicate(timeout=60)
    finally:
        if srun.poll() is None:
            srun.kill()
            srun.wait()
    assert srun.returncode != 0
    assert wait_until_gone(run_id, 15) == []
    for rank in range(4):
        assert (tmp_path / f"rank{rank}.signals").read_text().split()[:2] == ["SIGUSR1", "SIGTERM"]  # USR1 once


def test_launcher_slurm_inside_salloc(slurm_env: dict[str, str]) -> None:
    run_id = _run_id()
    res = _run(
        [
            "salloc",
            "-N2",
            *DSLAUNCH,
            "--launcher",
            "slurm",
            "--nproc-per-node",
            "2",
            "--run-id",
            run_id,
            "--log-level",
            "debug",
            "--mesh",
            "dp_shard=-1",
            SCRIPT,
            "; touch /tmp/dslaunch-pwned",
            "'\"",
        ],
        slurm_env,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    facts = _facts(res.stdout)
    assert [(f["RANK"], f["DSLAUNCH_HOST"]) for f in facts] == [("0", "n1"), ("1", "n1"), ("2", "n2"), ("3", "n2")]
    assert all(f["argv"] == ["; touch /tmp/dslaunch-pwned", "'\""] for f in facts)
    assert not os.path.exists("/tmp/dslaunch-pwned")
    assert len({f["MASTER_PORT"] for f in facts}) == 1
    assert all(
        (f["DSLAUNCH_LOG_LEVEL"], f["DSLAUNCH_MESH"], f["DSLAUNCH_RUN_ID"]) == ("debug", "dp_shard=-1", run_id)
        for f in facts
    )

    fail = _run(
        ["salloc", "-N2", *DSLAUNCH, "--nproc-per-node", "1", SCRIPT],
        slurm_env,
        {"FAIL_RANK": "1", "FAIL_CODE": "5", "SLEEP": "120"},
    )
    assert fail.returncode == 5, fail.stdout + fail.stderr  # auto picks slurm inside an allocation


def test_a_task_still_starting_when_a_rank_fails_does_not_hide_its_code(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """Node 0's task starts 20 s late: node 1's rank fails first, node 0's task never hears of it and is killed by
    srun's --kill-on-bad-exit SIGTERM while it starts (srun exits 143); the job exits with the rank's 5."""
    late = tmp_path / "late-python"
    late.write_text(f'#!/bin/sh\nif [ "$SLURM_NODEID" = 0 ]; then sleep 20; fi\nexec {sys.executable} "$@"\n')
    late.chmod(0o755)
    run_id = _run_id()
    fail = _run(
        ["salloc", "-N2", *DSLAUNCH, "--remote-python", str(late), "--nproc-per-node", "1", "--run-id", run_id, SCRIPT],
        slurm_env,
        {"FAIL_RANK": "1", "FAIL_CODE": "5", "SLEEP": "120"},
    )
    out = fail.stdout + fail.stderr
    assert re.search(r"srun: error: n1: task 0: (Terminated|Killed)", out), out  # the case of the CI failure
    assert fail.returncode == 5, out
    assert wait_until_gone(run_id, 15) == []


def test_sbatch_example(slurm_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    res = _run(
        [
            "sbatch",
            "--wait",
            "-N2",
            f"--output={out}",
            "--export=ALL,DSLAUNCH_NPROC=2,SCRIPT=" + SCRIPT,
            str(ROOT / "examples" / "slurm" / "train.sbatch"),
        ],
        {**slurm_env, "PATH": _venv_path(slurm_env)},
    )
    text = out.read_text() if out.exists() else ""
    assert res.returncode == 0, res.stdout + res.stderr + text
    assert [f["RANK"] for f in _facts(text)] == ["0", "1", "2", "3"]


@pytest.mark.torch
def test_gloo_collectives_across_two_slurm_nodes(slurm_env: dict[str, str]) -> None:
    res = _run(
        [
            "srun",
            "-N2",
            "--ntasks-per-node=1",
            *DSLAUNCH,
            "--nproc-per-node",
            "2",
            "--master-port",
            "0",
            str(ROOT / "examples" / "train.py"),
            "--steps",
            "2",
        ],
        slurm_env,
        {"DSLAUNCH_PG_TIMEOUT": "60"},
        limit=150,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "step 1: all_reduce over 4 ranks = 6 (ok)" in res.stdout
    assert "done: 4 ranks, backend gloo" in res.stdout


def _venv_path(env: dict[str, str]) -> str:
    return os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])


def test_sigterm_to_launcher_slurm_stops_the_step_gracefully(slurm_env: dict[str, str], tmp_path: Path) -> None:
    import psutil

    run_id = _run_id()
    salloc = _start(
        ["salloc", "-N2", *DSLAUNCH, "--launcher", "slurm", "--nproc-per-node", "2", "--run-id", run_id, SCRIPT],
        {**slurm_env, "OUT_DIR": str(tmp_path), "SLEEP": "120"},
    )
    try:
        for rank in range(4):
            assert wait_for_file(str(tmp_path / f"rank{rank}.ready"), 60), f"rank {rank} never started"
        launcher = [
            p
            for p in psutil.Process(salloc.pid).children(recursive=True)
            if p.cmdline()[1:5] == ["-m", "dslaunch", "--launcher", "slurm"]
        ]
        assert len(launcher) == 1
        launcher[0].terminate()
        _out, err = salloc.communicate(timeout=60)
    finally:
        if salloc.poll() is None:
            salloc.kill()
            salloc.wait()
    assert salloc.returncode == 143, err
    for rank in range(4):  # a graceful SIGTERM (from Slurm, maybe again from the agent), not srun's SIGKILL
        assert set((tmp_path / f"rank{rank}.signals").read_text().split()) == {"SIGTERM"}
    assert wait_until_gone(run_id, 15) == []


@pytest.mark.parametrize("mode", ["daemon", "chatty"])
def test_nothing_a_rank_starts_outlives_the_step(slurm_env: dict[str, str], mode: str, tmp_path: Path) -> None:
    """proctrack/linuxproc lets a setsid daemon escape the step; the node agent (a subreaper) does not."""
    run_id = _run_id()
    job = str(ROOT / "tests" / "scripts" / "job.py")
    argv = ["srun", "-N2", "--ntasks-per-node=1", *DSLAUNCH, "--nproc-per-node", "1", "--run-id", run_id]
    res = _run([*argv, "--shutdown-timeout", "2", job, mode, str(tmp_path), "0"], slurm_env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert wait_until_gone(run_id, 10) == []


def test_hang_timeout_in_each_slurm_task(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """One dslaunch per node (srun task): each decides for its own node (docs/hangs.md); the step ends 124 with
    every rank's stack."""
    run_id = _run_id()
    waiter = str(ROOT / "tests" / "scripts" / "waiter.py")
    start = time.monotonic()
    job = [*DSLAUNCH, "--nproc-per-node", "2", "--hang-timeout", "2", "--run-id", run_id, waiter, "silent", "1,1,1,1"]
    res = _run(["srun", "-N2", "--ntasks-per-node=1", *job], slurm_env)
    took = time.monotonic() - start
    out = res.stdout + res.stderr
    assert res.returncode == 124, out
    for rank, host in ((0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")):
        assert f'[{host}:rank{rank}]:   File "{waiter}", line' in out and "in stuck_here" in out, out
    assert "dslaunch: hang: no rank made progress for 2 s" in out, out
    assert "stopped this node's 2 of 4 ranks (exit 124)" in out, out
    assert took < 40, f"{took:.0f} s"
    assert wait_until_gone(run_id, 10) == []


def _each_stack_once_after(
    argv: list[str], env: dict[str, str], folder: Path, quit_launchers: Callable[[subprocess.Popen[str]], None]
) -> None:
    """Run ``argv`` (4 ``waiter.py wait`` ranks on n1, n2); once all are ready, ``quit_launchers`` sends SIGQUIT;
    the job must go on, end 0 when let go, and show every rank's stack exactly once."""
    proc = _start(argv, env)
    try:
        for rank in range(4):
            assert wait_for_file(str(folder / f"ready.{rank}"), 60), f"rank {rank} never started"
        quit_launchers(proc)
        time.sleep(3.0)
        assert proc.poll() is None
        (folder / "go").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out + err
    for rank, host in ((0, "n1"), (1, "n1"), (2, "n2"), (3, "n2")):
        stacks = re.findall(rf'^\[{host}:rank{rank}\]:   File ".*waiter\.py", line \d+ in waiting_here$', err, re.M)
        assert len(stacks) == 1, err


def test_sigquit_to_the_launchers_of_a_slurm_step_prints_every_stack(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """SIGQUIT to each srun task's dslaunch and its forked agent (what Ctrl-\\ does on one node): every rank's stack,
    once, and the step goes on to end 0."""
    run_id = _run_id()
    waiter = str(ROOT / "tests" / "scripts" / "waiter.py")
    job = [*DSLAUNCH, "--nproc-per-node", "2", "--run-id", run_id, waiter, "wait", str(tmp_path)]

    def quit_every_task(_srun: subprocess.Popen[str]) -> None:
        launchers = [
            p
            for p in psutil.process_iter(["cmdline"])
            if "dslaunch" in (p.info["cmdline"] or [])[2:3] and run_id in (p.info["cmdline"] or [])
        ]
        assert len(launchers) == 4, launchers  # two srun tasks, each with its forked agent
        for p in launchers:
            p.send_signal(signal.SIGQUIT)

    _each_stack_once_after(["srun", "-N2", "--ntasks-per-node=1", *job], slurm_env, tmp_path, quit_every_task)
    assert wait_until_gone(run_id, 10) == []


def test_sigquit_to_launcher_slurm_prints_every_stack_and_the_step_goes_on(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    """Ctrl-\\ to `salloc dslaunch --launcher slurm`: srun would abort the step on SIGQUIT, so the launcher asks each
    task (scancel --signal=WINCH, ignored by the ranks); every rank's stack comes out once and the step ends 0."""
    run_id = _run_id()
    waiter = str(ROOT / "tests" / "scripts" / "waiter.py")
    job = [*DSLAUNCH, "--launcher", "slurm", "--nproc-per-node", "2", "--run-id", run_id, waiter, "wait", str(tmp_path)]

    def quit_the_launcher(salloc: subprocess.Popen[str]) -> None:
        children = psutil.Process(salloc.pid).children(recursive=True)
        next(p for p in children if p.cmdline()[1:3] == ["-m", "dslaunch"]).send_signal(signal.SIGQUIT)

    _each_stack_once_after(["salloc", "-N2", *job], slurm_env, tmp_path, quit_the_launcher)
    assert wait_until_gone(run_id, 10) == []


def test_sigkill_to_launcher_slurm_leaves_no_step_behind(slurm_env: dict[str, str], tmp_path: Path) -> None:
    """The allocation outlives the launcher (salloc runs on after it): srun dies with the launcher (its
    parent-death signal), so the step and its ranks go (issue 31, item 4: a launcher SIGKILL leaves nothing)."""
    import psutil

    run_id = _run_id()
    inner = [*DSLAUNCH, "--launcher", "slurm", "--nproc-per-node", "1", "--run-id", run_id, SCRIPT]
    salloc = _start(
        ["salloc", "-N2", "sh", "-c", '"$@"; sleep 30', "sh", *inner],
        {**slurm_env, "OUT_DIR": str(tmp_path), "SLEEP": "120"},
    )
    try:
        for rank in range(2):
            assert wait_for_file(str(tmp_path / f"rank{rank}.ready"), 60), f"rank {rank} never started"
        launcher = [
            p
            for p in psutil.Process(salloc.pid).children(recursive=True)
            if p.cmdline()[1:5] == ["-m", "dslaunch", "--launcher", "slurm"]
        ]
        assert len(launcher) == 1
        launcher[0].kill()
        assert _step_gone(run_id, 20) == [], "the step outlived its launcher"
    finally:
        salloc.kill()
        salloc.wait()


def _step_gone(run_id: str, timeout: float) -> list[int]:
    """Wait until no process has the job's run id in its environment (the agents and ranks of the step; salloc's
    wrapper names the run id only on its command line); what is still there at the deadline."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        left = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("DSLAUNCH_RUN_ID") == run_id:
                    left.append(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)
