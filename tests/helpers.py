"""Shared test helpers: run the real CLI in a subprocess, find leftover job processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import psutil

DSLAUNCH = [sys.executable, "-m", "dslaunch"]
SCRIPTS = Path(__file__).parent / "scripts"  # the programs tests launch as ranks, shared by every test package


def run_cli(
    args: Sequence[str],
    *,
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``dslaunch ARGS`` to completion and capture its output as text."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([*DSLAUNCH, *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd)


def job_processes(run_id: str) -> list[psutil.Process]:
    """Every live process whose environment carries DSLAUNCH_RUN_ID=run_id, or whose argv names it."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid == os.getpid():
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
            if env.get("DSLAUNCH_RUN_ID") == run_id or any(run_id in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie is dead, only not yet reaped (the test session is a subreaper, so what a
    launcher adopted and left unreaped comes to it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until_gone(run_id: str, timeout: float) -> list[psutil.Process]:
    """Poll until no process of the job is left; return what is still alive at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        left = job_processes(run_id)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def until(check: Callable[[], object], timeout: float = 5.0, poll: float = 0.01) -> bool:
    """Whether ``check()`` came true within ``timeout`` seconds, looked at every ``poll``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    return True


def wait_for_file(path: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return True
        time.sleep(0.05)
    return False


def threads_since(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads alive now that were not alive at ``before`` (``set(threading.enumerate())``): a count would be fooled
    by a thread of an earlier test in this worker ending meanwhile."""
    return [t for t in threading.enumerate() if t not in before]
