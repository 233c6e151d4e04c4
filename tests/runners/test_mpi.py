"""MPI runners: command building (table), and real Open MPI / MPICH jobs on this machine."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners import mpi
from tests.helpers import DSLAUNCH, SCRIPTS, job_processes, wait_until_gone
from tests.plans import make_plan

SCRIPT = str(SCRIPTS / "rank_report.py")
ENV = {"CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}


def _need(flavour: mpi.Flavour) -> None:
    if any(shutil.which(p) for p in flavour.programs):
        return
    why = f"{flavour.name} is not installed ({flavour.install_hint})"
    if os.environ.get("CI"):
        pytest.fail(why + " but CI is set: scripts/install-system-deps.sh should have installed it")
    pytest.skip(why)


def _plan(hosts: list[str], launcher_args: Sequence[str] = (), remote: dict[str, Any] | None = None) -> LaunchPlan:
    return make_plan(
        launcher="openmpi",
        hosts=hosts,
        target="train.py",
        cwd="/work dir",
        launcher_args=tuple(launcher_args),
        remote=RemoteSettings(**(remote or {})),
    )


# ---- pure command building ------------------------------------------------------------------


def test_hostfiles_give_one_slot_per_node_in_node_order() -> None:
    plan = _plan(["w0", "w1", "w2"])
    assert mpi.hostfile_text(plan, mpi.OPENMPI) == "w0 slots=1\nw1 slots=1\nw2 slots=1\n"
    assert mpi.hostfile_text(plan, mpi.MPICH) == "w0:1\nw1:1\nw2:1\n"


def test_user_at_host_is_refused_with_the_fix() -> None:
    with pytest.raises(mpi.MpiError, match=r"~/\.ssh/config"):
        mpi.hostfile_text(_plan(["alice@w0"]), mpi.OPENMPI)


@pytest.mark.parametrize(
    ("flavour", "options", "expected"),
    [
        (
            mpi.OPENMPI,
            {},
            [
                "mpirun",
                "-n",
                "2",
                "--hostfile",
                "HF",
                "--map-by",
                "slot",
                "--bind-to",
                "none",
                "-x",
                "DSLAUNCH_PLAN_B64",
                "-x",
                "DSLAUNCH_MPI_DIAL",
                "-x",
                "DSLAUNCH_DIAL_ADDR",
                "--wdir",
                "/work dir",
            ],
        ),
        (
            mpi.OPENMPI,
            {"launcher_args": ["--mca", "btl", "^openib"], "remote": {"ssh_port": 2222}},
            [
                "mpirun",
                "-n",
                "2",
                "--hostfile",
                "HF",
                "--map-by",
                "slot",
                "--bind-to",
                "none",
                "--mca",
                "plm_rsh_args",
                "-p 2222",
                "-x",
                "DSLAUNCH_PLAN_B64",
                "-x",
                "DSLAUNCH_MPI_DIAL",
                "-x",
                "DSLAUNCH_DIAL_ADDR",
                "--wdir",
                "/work dir",
                "--mca",
                "btl",
                "^openib",
            ],
        ),
        (
            mpi.MPICH,
            {},
            [
                "mpiexec",
                "-n",
                "2",
                "-ppn",
                "1",
                "-f",
                "HF",
                "-genvlist",
                "DSLAUNCH_PLAN_B64,DSLAUNCH_MPI_DIAL,DSLAUNCH_DIAL_ADDR",
                "-wdir",
                "/work dir",
            ],
        ),
        (
            mpi.MPICH,
            {"launcher_args": ["-genv", "A", "b c"]},
            [
                "mpiexec",
                "-n",
                "2",
                "-ppn",
                "1",
                "-f",
                "HF",
                "-genvlist",
                "DSLAUNCH_PLAN_B64,DSLAUNCH_MPI_DIAL,DSLAUNCH_DIAL_ADDR",
                "-wdir",
                "/work dir",
                "-genv",
                "A",
                "b c",
            ],
        ),
    ],
)
def test_mpi_argv(
    flavour: mpi.Flavour, options: dict[str, object], expected: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    argv = mpi.mpi_argv(_plan(["w0", "w1"], **options), flavour, expected[0], "HF", python="/py")
    assert argv == [*expected, "/py", "-m", "dslaunch.agent", "--node-rank", "mpi", "--no-control"]


def test_plan_travels_in_the_environment_not_the_argv() -> None:
    plan = _plan(["w0"])
    dial = "dslaunch-dial 4242 " + "ab" * 32 + " mpi"
    env = mpi.mpi_env_for(plan, {}, dial)
    argv = mpi.mpi_argv(plan, mpi.OPENMPI, "mpirun", "HF")
    assert env["DSLAUNCH_PLAN_B64"] and all(env["DSLAUNCH_PLAN_B64"] not in a for a in argv)
    assert env["DSLAUNCH_MPI_DIAL"] == dial and all("ab" * 32 not in a for a in argv)  # the dial-back secret too


@pytest.mark.parametrize(
    ("master", "given", "expected"),
    [("127.0.0.1", None, "127.0.0.1"), ("localhost", None, "127.0.0.1"), ("127.0.0.1", "10.1.2.3", "10.1.2.3")],
)
def test_agents_dial_back_to_the_address_that_reaches_node_0(master: str, given: str | None, expected: str) -> None:
    """No packet is sent: the address is the one this machine would reach node 0 from, unless the user gave one."""
    base = {} if given is None else {"DSLAUNCH_DIAL_ADDR": given}
    plan = make_plan(launcher="openmpi", hosts=["w0"], master_addr=master)
    assert mpi.mpi_env_for(plan, base, "x")["DSLAUNCH_DIAL_ADDR"] == expected


# ---- real jobs -----------------------------------------------------------------------------


def _launch(
    flavour: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    cmd = [*DSLAUNCH, "--launcher", flavour, "--master-port", "0", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **ENV, **(env or {})}
    )


def _reports(stdout: str) -> dict[int, dict[str, object]]:
    views = [json.loads(line.split("REPORT ", 1)[1]) for line in stdout.splitlines() if "REPORT " in line]
    return {int(v["RANK"]): v for v in views}


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("flavour", [mpi.OPENMPI, mpi.MPICH], ids=lambda f: f.name)
def test_real_job_env_args_and_launcher_args(flavour: mpi.Flavour) -> None:
    _need(flavour)
    extra = "-x FROM_LAUNCHER_ARGS=yes" if flavour is mpi.OPENMPI else "-genv FROM_LAUNCHER_ARGS yes"
    result = _launch(
        flavour.name, "--nproc-per-node", "2", "--launcher-args", extra, SCRIPT, "it's", "a b", "$(touch pwned)"
    )
    assert result.returncode == 0, result.stderr
    views = _reports(result.stdout)
    assert sorted(views) == [0, 1]
    for rank, view in views.items():
        assert view["LOCAL_RANK"] == str(rank) and view["WORLD_SIZE"] == "2" and view["NODE_RANK"] == "0"
        assert view["MASTER_ADDR"] == "127.0.0.1" and view["MASTER_PORT"] != "0"
        assert view["argv"] == ["it's", "a b", "$(touch pwned)"]
        assert view["FROM_LAUNCHER_ARGS"] == "yes"  # --launcher-args reached mpirun
        assert view["mpi_vars"] == []  # MPI's rank identity (of the agents) is hidden from ranks
        assert view["ROLE_RANK"] == str(rank) and view["TORCHELASTIC_RUN_ID"]
    assert not os.path.exists("pwned")


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("flavour", [mpi.OPENMPI, mpi.MPICH], ids=lambda f: f.name)
def test_failing_rank_exit_code_propagates(flavour: mpi.Flavour) -> None:
    """DeepSpeed's MPICH helper exits 0 whatever the script did; the rank's own code must come back."""
    _need(flavour)
    result = _launch(
        flavour.name, "--nproc-per-node", "2", SCRIPT, env={"FAIL_RANK": "1", "FAIL_CODE": "7", "SLEEP": "30"}
    )
    assert result.returncode == 7, (result.stdout, result.stderr)
    assert "rank 1 (local_rank 1, node 0) on host localhost exited with code 7" in result.stderr


@pytest.mark.launch
@pytest.mark.cluster
def test_rank_killed_by_signal_gives_128_plus_n() -> None:
    _need(mpi.OPENMPI)
    result = _launch("openmpi", SCRIPT, env={"FAIL_RANK": "0", "FAIL_SIGNAL": str(int(signal.SIGKILL))})
    assert result.returncode == 128 + signal.SIGKILL, result.stderr
    assert "killed by SIGKILL" in result.stderr


@pytest.mark.launch
@pytest.mark.cluster
def test_sigterm_to_launcher_tears_everything_down() -> None:
    _need(mpi.OPENMPI)
    run_id = f"mpiterm{os.getpid()}"
    proc = subprocess.Popen(
        [*DSLAUNCH, "--launcher", "openmpi", "--master-port", "0", "--run-id", run_id, "--nproc-per-node", "2", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV, "SLEEP": "60"},
    )
    try:
        deadline = time.monotonic() + 30
        seen = 0
        assert proc.stdout is not None
        while seen < 2 and time.monotonic() < deadline:
            seen += "REPORT " in proc.stdout.readline()
        assert seen == 2, "ranks did not start"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("flavour", [mpi.OPENMPI, mpi.MPICH], ids=lambda f: f.name)
def test_sigterm_to_launcher_every_rank_saves(flavour: mpi.Flavour, tmp_path: Path) -> None:
    """A requested stop under mpirun: the agents it started signal their ranks' main processes only, so ranks with
    DataLoader-like workers save (docs/stopping.md)."""
    _need(flavour)
    run_id = f"mpistop{os.getpid()}"
    argv = [*DSLAUNCH, "--launcher", flavour.name, "--master-port", "0", "--run-id", run_id, "--nproc-per-node", "2"]
    proc = subprocess.Popen(
        [*argv, "--stop-grace", "10", str(SCRIPTS / "stop_saver.py"), str(tmp_path)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV},
    )
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"rank{r}.ready").exists() for r in range(2)) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert [(tmp_path / f"rank{r}.saved").exists() for r in range(2)] == [True, True], err
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.launch
def test_missing_mpi_program_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [*DSLAUNCH, "--launcher", "mpich", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **ENV, "PATH": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "--launcher mpich needs one of mpiexec.hydra" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.launch
def test_dry_run_shows_the_mpirun_line_and_hostfile() -> None:
    result = subprocess.run(
        [*DSLAUNCH, "--launcher", "openmpi", "--dry-run", "--launcher-args", "--mca btl ^openib", SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **ENV},
    )
    assert result.returncode == 0, result.stderr
    assert "--hostfile '{hostfile}'" in result.stdout and "--mca btl '^openib'" in result.stdout
    assert "{hostfile}: localhost slots=1" in result.stdout


@pytest.mark.launch
def test_agent_outside_mpi_says_what_is_missing() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI"))}
    result = subprocess.run(
        [sys.executable, "-m", "dslaunch.agent", "--node-rank", "mpi"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2 and "OMPI_COMM_WORLD_RANK" in result.stderr


def test_ssh_settings_reach_both_mpi_flavours() -> None:
    plan = _plan(["w0", "w1"], remote={"ssh_config": "/cfg dir/ssh_config", "ssh_port": 2222})
    argv = mpi.mpi_argv(plan, mpi.OPENMPI, "mpirun", "HF", python="/py")
    assert argv[argv.index("plm_rsh_args") + 1] == "-F /cfg dir/ssh_config -p 2222"
    assert mpi.ssh_wrapper_text(plan) == "#!/bin/sh\nexec ssh -F '/cfg dir/ssh_config' -p 2222 \"$@\"\n"
    argv = mpi.mpi_argv(plan, mpi.MPICH, "mpiexec", "HF", python="/py", ssh="/tmp/x/ssh")
    assert argv[argv.index("-launcher-exec") + 1] == "/tmp/x/ssh"
    assert mpi.ssh_wrapper_text(_plan(["w0"])) is None


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.torch
def test_torch_gloo_job_under_openmpi_with_local_rank_arg() -> None:
    """`deepspeed --launcher openmpi --num_gpus 2 script.py` as a DeepSpeed user writes it: real gloo ranks."""
    _need(mpi.OPENMPI)
    script = str(SCRIPTS / "gloo_sum.py")
    result = _launch("openmpi", "--num_gpus", "2", "--local-rank-arg", script, timeout=120)
    assert result.returncode == 0, result.stderr
    sums = sorted(line.split("SUM ", 1)[1] for line in result.stdout.splitlines() if "SUM " in line)
    assert sums == ["0 0 1", "1 1 1"]


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("flavour", [mpi.OPENMPI, mpi.MPICH], ids=lambda f: f.name)
def test_killed_agent_is_a_lost_node_not_a_success(flavour: mpi.Flavour) -> None:
    """The agents' done events are merged: one agent that never reports must fail the job."""
    _need(flavour)
    import psutil

    run_id = f"mpilost{flavour.name}{os.getpid()}"
    proc = subprocess.Popen(
        [
            *DSLAUNCH,
            "--launcher",
            flavour.name,
            "--master-port",
            "0",
            "--run-id",
            run_id,
            "--nproc-per-node",
            "2",
            SCRIPT,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV, "SLEEP": "60"},
    )
    try:
        assert proc.stdout is not None
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 2 and time.monotonic() < deadline:
            seen += "REPORT " in proc.stdout.readline()
        assert seen == 2, "ranks did not start"
        rank0 = next(p for p in job_processes(run_id) if p.environ().get("RANK") == "0")
        agent = psutil.Process(rank0.ppid())
        assert "dslaunch.agent" in " ".join(agent.cmdline())
        agent.kill()
        code = proc.wait(30)
        _, err = proc.communicate()
    finally:
        proc.kill()
        proc.wait()
    assert code not in (0, None), err
    assert "disappeared" in err
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("flavour", [mpi.OPENMPI, mpi.MPICH], ids=lambda f: f.name)
def test_sigusr1_reaches_the_ranks(flavour: mpi.Flavour) -> None:
    _need(flavour)
    script = str(SCRIPTS / "wait_usr1.py")
    proc = subprocess.Popen(
        [*DSLAUNCH, "--launcher", flavour.name, "--master-port", "0", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV},
    )
    try:
        assert proc.stdout is not None
        assert "READY" in proc.stdout.readline()
        time.sleep(0.5)
        proc.send_signal(signal.SIGUSR1)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert "[rank0]: GOT" in out and proc.returncode == 0


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("flavour", [mpi.OPENMPI, mpi.MPICH], ids=lambda f: f.name)
def test_max_restarts_runs_mpirun_again(flavour: mpi.Flavour, tmp_path: Path) -> None:
    _need(flavour)
    flaky = str(SCRIPTS / "flaky.py")
    args = ["--nproc-per-node", "2", "--max-restarts", "1", "--restart-delay", "0", flaky, str(tmp_path), "1", "1", "7"]
    result = _launch(flavour.name, *args)
    assert result.returncode == 0, (result.stdout, result.stderr)
    seen = [line.split() for line in (tmp_path / "attempts.txt").read_text().splitlines()]
    assert sorted(r for a, r, _m in seen if a == "1") == ["0", "1"]
    assert "the job ran 2 times (--max-restarts 1)" in result.stderr


@pytest.mark.launch
@pytest.mark.cluster
def test_hang_timeout_under_mpirun() -> None:
    """Every agent's idle report comes through mpirun's one stream; no stacks there (mpirun keeps SIGQUIT)."""
    _need(mpi.OPENMPI)
    waiter = str(SCRIPTS / "waiter.py")
    result = _launch("openmpi", "--nproc-per-node", "2", "--hang-timeout", "1.5", waiter, "silent", "1,1")
    assert result.returncode == 124, (result.stdout, result.stderr)
    assert (
        "dslaunch: hang: no rank made progress for 1.5 s; least progress: unknown [no stacks with --launcher "
        "openmpi]; stopped all 2 ranks (exit 124)"
    ) in result.stderr
