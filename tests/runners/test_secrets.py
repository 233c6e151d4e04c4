"""An exported secret reaches every rank and no command line, dry run or log, over every runner (issue 11).

While the job runs, every process on this machine (launcher, pdsh, ssh clients, sshd's shells,
srun, slurmstepd, mpirun, orted/hydra, node agents, ranks) is checked: the token may be in
environments, which only its owner can read, but never in a /proc/PID/cmdline, which anyone can.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import DSLAUNCH, SCRIPTS, wait_for_file

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

SCRIPT = str(SCRIPTS / "hold_secret.py")
ROOT = Path(__file__).resolve().parents[2]
RUNNERS = ["local", "ssh", "pdsh", "slurm", "openmpi", "mpich"]


BASE64_RUN = re.compile(r"[A-Za-z0-9_+/-]{24,}={0,2}")


def _readable(argv: list[str]) -> str:
    """The command line as text, with every base64-looking run decoded too (a plan hides there)."""
    text = " ".join(argv)
    decoded = []
    for run in BASE64_RUN.findall(text):
        for decode in (base64.urlsafe_b64decode, base64.b64decode):
            try:
                decoded.append(decode(run + "=" * (-len(run) % 4)).decode("utf-8", "replace"))
            except (binascii.Error, ValueError):
                continue
    return " ".join([text, *decoded])


def _cmdlines_with(token: str) -> list[str]:
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            argv = proc.info["cmdline"] or []
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.pid != os.getpid() and token in _readable(argv):
            found.append(f"{proc.pid}: {' '.join(argv)[:300]}")
    return found


def _runner_args(runner: str, request: pytest.FixtureRequest) -> tuple[list[str], list[str], dict[str, str], int]:
    """(prefix command, dslaunch options, environment, ranks) for one runner on this machine's test beds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSLAUNCH_", "PDSH_", "SLURM_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    if runner == "local":
        return [], ["--nproc-per-node", "2"], env, 2
    if runner in ("ssh", "pdsh"):
        from tests.runners.remote.launch import base_args

        cluster = request.getfixturevalue("ssh_cluster")
        return [], base_args(cluster, runner, ["node1", "node2"], slots=1), env, 2
    if runner == "slurm":
        slurm_env = request.getfixturevalue("slurm_env")
        return (
            ["timeout", "-k", "5", "90", "salloc", "-N2"],
            ["--launcher", "slurm", "--nproc-per-node", "1"],
            {
                **slurm_env,
                "CUDA_VISIBLE_DEVICES": "",
            },
            2,
        )
    from dslaunch.runners import mpi

    flavour = mpi.OPENMPI if runner == "openmpi" else mpi.MPICH
    if not any(shutil.which(p) for p in flavour.programs):
        reason = f"{flavour.programs[0]} missing (scripts/install-system-deps.sh installs it)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return [], ["--launcher", runner, "--nproc-per-node", "2"], env, 2


@pytest.mark.parametrize("runner", RUNNERS)
def test_exported_secret_is_on_no_command_line(runner: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    token = f"tok-{uuid.uuid4().hex}"
    prefix, options, env, ranks = _runner_args(runner, request)
    out_dir, logs = tmp_path / "out", tmp_path / "logs"
    out_dir.mkdir()
    release = out_dir / "release"
    env_file = tmp_path / "job.env"
    env_file.write_text(f"OUT_DIR={out_dir}\nRELEASE={release}\n")
    env_file.chmod(0o600)
    # The value comes from the launcher's environment (--export NAME): what the user typed stays private.
    env.update(SECRET_TOKEN=token, SECRET_SHA256=hashlib.sha256(token.encode()).hexdigest())
    job = [
        *options,
        "--master-port",
        "0",
        "--export",
        "SECRET_TOKEN",
        "--export",
        "SECRET_SHA256",
        "--env-file",
        str(env_file),
        "--log-dir",
        str(logs),
        SCRIPT,
    ]

    dry = subprocess.run([*DSLAUNCH, "--dry-run", *job], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert token not in dry.stdout + dry.stderr

    proc = subprocess.Popen(
        [*prefix, *DSLAUNCH, *job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        for rank in range(ranks):
            assert wait_for_file(str(out_dir / f"ready.{rank}"), 60), f"rank {rank} never started"
        seen = _cmdlines_with(token)
    finally:
        release.touch()
        stdout, stderr = proc.communicate(timeout=90)
    assert seen == [], "\n".join(seen)
    assert proc.returncode == 0, stdout + stderr
    for rank in range(ranks):
        assert (out_dir / f"ready.{rank}").read_text() == "ok"  # the secret did reach every rank
    assert token not in stdout + stderr
    for path in logs.rglob("*"):
        if path.is_file():
            assert token not in path.read_text(errors="replace"), path
