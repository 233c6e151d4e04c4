"""Suite-wide set-up: no leaking Slurm job, one private sshd shared by the remote and MPI tests, and a check
after every test that nothing any job started is still alive."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from testbeds.ssh_cluster import SshCluster

# Inside salloc/sbatch, `--launcher auto` would (rightly) choose Slurm for every launch test.
for _name in [n for n in os.environ if n.startswith("SLURM_")]:
    del os.environ[_name]


@pytest.fixture(scope="session")
def ssh_cluster() -> Iterator[SshCluster]:
    """One private sshd on 127.0.0.2-5 for every test that needs remote hosts (ssh, pdsh, MPI over ssh)."""
    from testbeds.ssh_cluster import start_cluster  # only when a test asks for hosts

    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)


def _job_processes() -> dict[int, str]:
    """Every live process (not a zombie) of a job this test session started: DSLAUNCH_RUN_ID in its environment,
    and this session among its ancestors (the session is a subreaper, so a double-forked daemon still counts;
    sshd and the Slurm daemons of the test beds are its children too)."""
    import psutil

    me = os.getpid()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            run_id = next((v[len(b"DSLAUNCH_RUN_ID=") :] for v in env if v.startswith(b"DSLAUNCH_RUN_ID=")), None)
            if run_id is None:
                continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            if me not in (p.pid for p in psutil.Process(int(entry)).parents()):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found[int(entry)] = f"run {run_id.decode(errors='replace')}: " + " ".join(
                    part.decode(errors="replace") for part in f.read().split(b"\0") if part
                )
        except (OSError, psutil.Error):
            continue
    return found


@pytest.fixture(scope="session", autouse=True)
def adopt_orphans() -> None:
    from dslaunch import _prctl

    _prctl.set_child_subreaper()


@pytest.fixture(autouse=True)
def no_job_outlives_its_test() -> Iterator[None]:
    """After every test, no process of any dslaunch job is alive (on this machine, which hosts every test node).

    Whatever is found gets a few seconds to go, then is killed and fails the test, so one leak is not blamed
    on the next test."""
    before = set(_job_processes())
    yield
    deadline = time.monotonic() + 5.0
    left = {pid: what for pid, what in _job_processes().items() if pid not in before}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {pid: what for pid, what in _job_processes().items() if pid not in before}
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        pytest.fail("processes of a job outlived the test:\n" + "\n".join(f"  {p}: {w}" for p, w in left.items()))
