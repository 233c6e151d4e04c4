"""Parity with DeepSpeed users rely on: --local_rank=N, core binding, per-rank logs, pid file, --force-multi."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from dslaunch.oslib import binding
from tests.helpers import DSLAUNCH, SCRIPTS
from tests.plans import cli_error, decision_of, plan_of

SCRIPT = str(SCRIPTS / "view.py")
ENV = {"CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DSLAUNCH, "--master-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **ENV, **(env or {})},
    )


def _views(stdout: str) -> dict[int, dict[str, object]]:
    found = [json.loads(line.split("VIEW ", 1)[1]) for line in stdout.splitlines() if "VIEW " in line]
    return {int(v["rank"]): v for v in found}


# ---- real runs --------------------------------------------------------------------------------


@pytest.mark.launch
def test_local_rank_arg_goes_right_after_the_script_as_deepspeed_puts_it() -> None:
    result = _run("--nproc-per-node", "2", "--local-rank-arg", SCRIPT, "--lr", "it's")
    assert result.returncode == 0, result.stderr
    views = _views(result.stdout)
    assert [views[r]["argv"] for r in (0, 1)] == [
        ["--local_rank=0", "--lr", "it's"],
        ["--local_rank=1", "--lr", "it's"],
    ]


@pytest.mark.launch
def test_a_remainder_script_parses_local_rank_as_under_deepspeed() -> None:
    """DeepSpeed runs `train.py --local_rank=N ARGS...`: argparse REMAINDER after --local_rank still sees it."""
    script = str(SCRIPTS / "remainder.py")
    result = _run("--nproc-per-node", "2", "--local-rank-arg", script, "cfg.json", "--epochs", "2")
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert f"REMAINDER local_rank={rank} rest=['cfg.json', '--epochs', '2']" in result.stdout, result.stdout


@pytest.mark.launch
def test_no_local_rank_by_default() -> None:
    result = _run(SCRIPT, "x")
    assert _views(result.stdout)[0]["argv"] == ["x"]


@pytest.mark.launch
@pytest.mark.skipif(shutil.which("numactl") is None and not os.environ.get("CI"), reason="numactl is not installed")
def test_bind_cores_to_rank_gives_each_rank_its_slice() -> None:
    usable = binding.usable_cores()
    if len(usable) < 2:
        pytest.skip("needs 2 usable cores")
    result = _run("--nproc-per-node", "2", "--bind_cores_to_rank", SCRIPT)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("--bind_cores_to_rank is DeepSpeed's spelling") == 1
    views = _views(result.stdout)
    half = len(usable) // 2
    assert views[0]["cores"] == list(usable[:half]) and views[1]["cores"] == list(usable[half : 2 * half])
    assert views[0]["omp"] == str(half)


@pytest.mark.launch
@pytest.mark.skipif(shutil.which("numactl") is None and not os.environ.get("CI"), reason="numactl is not installed")
def test_bind_core_list_is_honoured() -> None:
    core = binding.usable_cores()[-1]
    result = _run("--bind-cores-to-rank", "--bind-core-list", str(core), SCRIPT)
    assert result.returncode == 0, result.stderr
    assert _views(result.stdout)[0]["cores"] == [core] and _views(result.stdout)[0]["omp"] == "1"


def test_bind_core_list_too_short_is_a_usage_error() -> None:
    args = ["--master-port", "0", "--nproc-per-node", "2", "--bind-cores-to-rank", "--bind-core-list", "0", SCRIPT]
    code, err = cli_error(args, env=ENV)
    assert code == 2 and "cannot give each of 2 ranks a core" in err


@pytest.mark.launch
def test_enable_each_rank_log_writes_per_rank_files(tmp_path: Path) -> None:
    result = _run("--nproc-per-node", "2", "--enable_each_rank_log", str(tmp_path / "logs"), SCRIPT)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert "VIEW " in (tmp_path / "logs" / f"rank{rank}.stdout.log").read_text()


@pytest.mark.launch
@pytest.mark.parametrize("spelling", ["--save-pid", "--save_pid"])
def test_pid_file_holds_the_launcher_pid_while_running_and_is_removed(spelling: str, tmp_path: Path) -> None:
    args = [spelling, str(tmp_path / "job.pid")] if spelling == "--save-pid" else [spelling]
    proc = subprocess.Popen(
        [*DSLAUNCH, "--master-port", "0", *args, SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV, "SLEEP": "2"},
    )
    path = tmp_path / "job.pid" if spelling == "--save-pid" else Path(f"/tmp/{proc.pid}.deepspeed")
    try:
        deadline = time.monotonic() + 20
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert path.read_text().strip() == str(proc.pid)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert not path.exists()


@pytest.mark.launch
def test_existing_pid_file_is_refused(tmp_path: Path) -> None:
    """Found when the pid file is written, after the plan: the real CLI's refusal (exit 2)."""
    (tmp_path / "job.pid").write_text("1\n")
    result = _run("--save-pid", str(tmp_path / "job.pid"), SCRIPT)
    assert result.returncode == 2 and "already exists" in result.stderr and "Traceback" not in result.stderr
    assert (tmp_path / "job.pid").read_text() == "1\n"


def test_force_multi_uses_a_remote_launcher_for_localhost() -> None:
    plan = plan_of(["--dry-run", "--force-multi", "train.py"])
    assert plan.launcher in ("pdsh", "ssh")
    assert plan_of(["--dry-run", "train.py"]).launcher == "local"


def test_launcher_args_unused_by_the_launcher_warn(capsys: pytest.CaptureFixture[str]) -> None:
    decision_of(["--master-port", "0", "--dry-run", "--launcher", "local", "--launcher-args", "-x A", SCRIPT], ENV)
    assert (
        "--launcher-args is only used by the openmpi, mpich, slurm launchers; ignored with --launcher local"
        in capsys.readouterr().err
    )
    decision_of(["--master-port", "0", "--dry-run", "--launcher", "openmpi", "--launcher-args", "-x A", SCRIPT], ENV)
    assert "--launcher-args" not in capsys.readouterr().err
