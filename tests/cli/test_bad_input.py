"""Hostile input gets one clear line and exit 2, with no traceback and nothing started (issue 12, item 7).

The refusals are checked in-process (tests/plans.py stops before anything could start); one of them, and the
checks that need a real process (a port in use, a real executable, the CPU affinity mask), run ``dslaunch``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH, run_cli
from tests.plans import cli_error, invoke

SCRIPT = "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran')\n"


@pytest.fixture
def job(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "not_exec").write_text("#!/bin/sh\n")
    (tmp_path / "bad.env").write_text("HF_TOKEN hf_s3cr3tvalue\n")
    for name, text in {
        "huge": "localhost slots=99999999999999\n",
        "arabic": "localhost slots=\u0662\n",
        "zero": "localhost slots=0\nother slots=0\n",
        "manyhosts": "".join(f"h{i} slots=4096\n" for i in range(300)),
    }.items():
        (tmp_path / name).write_text(text)
    return tmp_path


CASES: dict[str, tuple[list[str], str]] = {
    "nproc-huge": (["--nproc-per-node", "99999999999", "--dry-run"], "more than 4096 ranks on one node"),
    "nproc-superscript": (["--nproc-per-node", "\u00b3"], "not a positive whole number"),
    "nproc-arabic": (["--nproc-per-node", "\u0662"], "not a positive whole number"),
    "slots-huge": (["-H", "{dir}/huge", "--dry-run"], "more than 4096 ranks on one host"),
    "slots-arabic": (["-H", "{dir}/arabic", "--dry-run"], "expected '<host> slots=<n>'"),
    "slots-zero": (["-H", "{dir}/zero", "--dry-run"], "every host has slots=0"),
    "world-huge": (["-H", "{dir}/manyhosts", "--dry-run"], "more than 1048576 slots in all"),
    "mesh-arabic": (["--mesh", "dp=\u0662", "--dry-run"], "is not a whole number"),
    "json-without-dry-run": (["--json"], "--json only shapes the --dry-run output"),
    "shutdown-nan": (["--shutdown-timeout", "nan"], "not a number of seconds"),
    "shutdown-inf": (["--shutdown-timeout", "inf"], "not a number of seconds"),
    "shutdown-huge": (["--shutdown-timeout", "1" + "0" * 400], "not in the range"),
    "connect-inf": (["--ssh-connect-timeout", "inf"], "not a number of seconds"),
    "connect-nan": (["--ssh-connect-timeout", "nan"], "not a number of seconds"),
    "port-underscore": (["--master-port", "1_000"], "not a whole number"),
    "port-arabic": (["--master-port", "\u0662\u0662"], "not a whole number"),
    "num-nodes-huge": (["--num-nodes", "99999999999999999999"], "not in the range"),
    "stop-grace-negative": (["--stop-grace", "-1"], "not a number of seconds"),
    "stop-grace-huge": (["--stop-grace", "1" + "0" * 9], "not in the range"),
    "stop-grace-nan": (["--stop-grace", "nan"], "not a number of seconds"),
    "stop-exit-code-256": (["--stop-exit-code", "256"], "not in the range"),
    "stop-on-term": (["--stop-on-signal", "TERM"], "is not one of USR1, USR2"),
    "stop-on-junk": (["--stop-on-signal", "USR1;rm"], "is not one of USR1, USR2"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_option_values(case: str, job: Path) -> None:
    args, expected = CASES[case]
    marker = job / "ran"
    code, err = cli_error([a.format(dir=job) for a in args] + [str(job / "train.py"), str(marker)])
    assert code == 2, err
    assert expected in err, err
    assert not marker.exists()


@pytest.mark.launch
@pytest.mark.parametrize("case", ["slots-huge", "nproc-superscript"])
def test_bad_input_in_a_real_process_is_one_line_without_a_traceback(case: str, job: Path) -> None:
    args, expected = CASES[case]
    marker = job / "ran"
    done = run_cli([a.format(dir=job) for a in args] + [str(job / "train.py"), str(marker)], timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and done.stderr.rstrip().endswith(errors[0]), done.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("{dir}/missing", "does not exist"),
        ("{dir}", "is not an executable file"),
        ("{dir}/not_exec", "is not an executable file"),
        ("no-such-program-xyz", "is not a program on PATH"),
    ],
)
def test_no_python_targets_that_cannot_run(target: str, expected: str, job: Path) -> None:
    code, err = cli_error(["--no-python", target.format(dir=job)])
    assert code == 2, err
    assert expected in err


def test_env_file_error_never_shows_the_value(job: Path) -> None:
    done = invoke(["--env-file", str(job / "bad.env"), "--dry-run", str(job / "train.py")])
    assert done.exit_code == 2, repr(done.exception)
    assert "expected NAME=VALUE" in done.stderr
    assert "s3cr3t" not in done.stderr + done.stdout


@pytest.mark.launch
def test_a_port_another_job_listens_on_is_refused_before_anything_starts(job: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        marker = job / "ran"
        done = run_cli(["--master-port", str(port), str(job / "train.py"), str(marker)], timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert not marker.exists()


@pytest.mark.launch
def test_the_executable_check_follows_the_mode_bits(job: Path) -> None:
    tool = job / "tool"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    done = run_cli(["--no-python", str(tool)], timeout=30, cwd=os.fspath(job))
    assert done.returncode == 0, done.stderr


@pytest.mark.launch
@pytest.mark.parametrize(("spelling", "cpus"), [("cpu", "0"), ("auto", "0"), ("cpu", "0,1")])
def test_nproc_cpu_and_auto_count_the_cpus_this_process_may_use(spelling: str, cpus: str, job: Path) -> None:
    """torchrun's spellings; CPUs from the affinity mask (a cpuset container), not the machine's count."""
    if not shutil.which("taskset") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs taskset and 2 CPUs")
    done = subprocess.run(
        ["taskset", "-c", cpus, *DSLAUNCH, "--nproc-per-node", spelling, "--dry-run", "--json", "x.py"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["world_size"] == len(cpus.split(","))


def test_nproc_gpu_without_gpus_says_so(job: Path) -> None:
    code, err = cli_error(["--nproc-per-node", "gpu", "--dry-run", "x.py"], env={"CUDA_VISIBLE_DEVICES": ""})
    assert code == 2 and "no GPU is visible here" in err
