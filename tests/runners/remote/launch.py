"""Helpers for remote launch tests: the CLI arguments for the test cluster, and process checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import uuid
from pathlib import Path

from testbeds.ssh_cluster import SshCluster, need
from tests.helpers import DSLAUNCH, SCRIPTS, job_processes, wait_for_file, wait_until_gone

SCRIPT = str(SCRIPTS / "job.py")
RUNNERS = ("ssh", "pdsh")


def base_args(cluster: SshCluster, runner: str, hosts: list[str], slots: int = 2) -> list[str]:
    if runner == "pdsh":
        need("pdsh")
    hostfile = cluster.hostfile(hosts, slots, name=f"hosts-{uuid.uuid4().hex[:6]}")
    return [
        "--hostfile",
        str(hostfile),
        "--launcher",
        runner,
        "--ssh-config",
        str(cluster.config),
        "--shutdown-timeout",
        "2",
    ]


LAUNCHER_OWN = ("PDSH_", "DS_ENV_FILE", "DSLAUNCH_", "GLOO_")  # names of this shell a test must not pass on


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_OWN)}
    env.update(extra or {})
    return env


def clean_overlay(extra: dict[str, str] | None = None) -> dict[str, str | None]:
    """``clean_env`` as an overlay for the in-process helpers of tests/plans.py (``None`` drops a name)."""
    return {**{k: None for k in os.environ if k.startswith(LAUNCHER_OWN)}, **(extra or {})}


def run(
    args: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DSLAUNCH, *args], capture_output=True, text=True, timeout=timeout, env=clean_env(env), cwd=cwd
    )


def start(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*DSLAUNCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env(env), cwd=cwd
    )


def records(stdout: str) -> list[dict]:
    """The JSON lines printed by ``job.py echo``, with the output prefix they came with."""
    found = []
    for line in stdout.splitlines():
        prefix, sep, rest = line.partition("]: ")
        if sep and rest.startswith("{"):
            found.append({**json.loads(rest), "prefix": prefix + "]"})
    return sorted(found, key=lambda r: r["rank"])


def wait_ready(folder: Path, world: int, timeout: float = 30) -> bool:
    return all(wait_for_file(str(folder / f"ready.{r}"), timeout) for r in range(world))


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.communicate(timeout=30)


__all__ = [
    "RUNNERS",
    "SCRIPT",
    "base_args",
    "clean_overlay",
    "job_processes",
    "records",
    "run",
    "start",
    "stop",
    "wait_ready",
    "wait_until_gone",
]
