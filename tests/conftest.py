"""Suite-wide set-up: no leaking Slurm job, one private sshd shared by the remote and MPI tests, and the
markers kept honest: a test marked to start processes is checked afterwards for anything its jobs left alive;
an unmarked test (the fast tier, ``make test-fast``) fails the moment it starts a process."""

from __future__ import annotations

import _posixsubprocess
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from testbeds.ssh_cluster import SshCluster

pytest_plugins = ["tests.beds"]  # the Slurm and network-namespace beds, for tests in any folder

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
    from dslaunch.oslib import prctl

    prctl.set_child_subreaper()


# The markers of tests that start processes; a test with none of them is in the fast tier.
PROCESS_MARKS = ("launch", "cluster", "torch", "gpu")
TEST_BEDS = ("ssh_cluster", "netns_cluster", "slurm_cluster", "slurm_env")  # fixtures only `cluster` tests use


def _marks(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers()}


@pytest.fixture(autouse=True)
def processes_only_where_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Tests marked launch/cluster/torch/gpu get the leftover-process check; any other test may start none."""
    marks = _marks(request.node)
    beds = [name for name in TEST_BEDS if name in request.fixturenames]
    if beds and "cluster" not in marks:
        pytest.fail(f"this test uses the test bed {', '.join(beds)}: mark it cluster (and launch)")
    if marks & set(PROCESS_MARKS):
        yield from _no_job_outlives_its_test()
    else:
        yield from _no_process_started()


def _planning_probe(argv: Any) -> bool:
    """``ssh -G HOST``: how the decision reads ssh_config for a remote host's address (read-only, milliseconds)."""
    words = [os.fsdecode(a) for a in argv or ()][:2]
    return len(words) == 2 and os.path.basename(words[0]) == "ssh" and words[1] == "-G"


# Every way this interpreter starts a process, and where each call's argv is (subprocess binds fork_exec at
# import on Python >= 3.11; multiprocessing calls _posixsubprocess's).
SPAWNERS: tuple[tuple[Any, str, int | None], ...] = (
    (_posixsubprocess, "fork_exec", 0),
    (subprocess, "_fork_exec", 0),
    (os, "fork", None),
    (os, "forkpty", None),
    (os, "posix_spawn", 1),
    (os, "posix_spawnp", 1),
    (os, "system", 0),
)


def _no_process_started() -> Iterator[None]:
    """Fail an unmarked test the moment it forks or executes anything but a planning probe."""
    started: list[str] = []

    def guard(name: str, real: Callable[..., Any], argv_at: int | None) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            argv = args[argv_at] if argv_at is not None and len(args) > argv_at else None
            if isinstance(argv, (str, bytes)):
                argv = [argv]
            if _planning_probe(argv):
                return real(*args, **kwargs)
            what = f"{name}({argv!r})" if argv else f"{name}()"
            if threading.current_thread() is not threading.main_thread():
                started.append(what)  # an exception here would end only that thread: fail at teardown
            pytest.fail(
                f"this test starts a process ({what}) but is not marked launch, cluster, torch or gpu: "
                "mark it, so the fast tier stays fast and leftovers are checked"
            )

        return refuse

    saved = [(owner, name, getattr(owner, name), at) for owner, name, at in SPAWNERS if getattr(owner, name, None)]
    for owner, name, real, argv_at in saved:
        setattr(owner, name, guard(f"{owner.__name__}.{name}", real, argv_at))
    try:
        yield
    finally:
        for owner, name, real, _ in saved:
            setattr(owner, name, real)
    if started:
        pytest.fail("this unmarked test started processes from a thread: " + "; ".join(started))


def _no_job_outlives_its_test() -> Iterator[None]:
    """After the test, no process of any dslaunch job is alive (on this machine, which hosts every test node).

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


# Under pytest-xdist (`make test` runs `-n 3 --dist loadgroup`): the tests of one session-wide test bed run on one
# worker, so each bed starts once; everything else spreads over the workers.
SHARED_BEDS = {"slurm_cluster": "slurm", "slurm_env": "slurm", "netns_cluster": "netns"}


# The slowest first: a worker that picks up a 40 s torch test or the Slurm bed near the end keeps the whole run
# waiting while the others idle (xdist hands out work in collection order). A test file moves as a whole, with its
# slowest test's tier, so its module-scoped fixtures (a network-namespace bed) are still made once.
TIERS = ("torch", "cluster", "launch")


def _tier(item: pytest.Item) -> int:
    marks = _marks(item)
    return next((i for i, mark in enumerate(TIERS) if mark in marks), len(TIERS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = next((SHARED_BEDS[f] for f in getattr(item, "fixturenames", ()) if f in SHARED_BEDS), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    file_tier: dict[str, int] = {}
    for item in items:
        file_tier[str(item.path)] = min(_tier(item), file_tier.get(str(item.path), len(TIERS)))
    items.sort(key=lambda item: file_tier[str(item.path)])
