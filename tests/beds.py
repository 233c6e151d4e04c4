"""The shared test beds as fixtures, for tests in any folder (a plugin of tests/conftest.py): a private 3-node
Slurm cluster (partitions debug: n1-n2, wide: n1-n3) for the session, stopped by PID, and two "hosts" in network
namespaces (per module: each test file starts its own). ``ssh_cluster`` is in tests/conftest.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbeds import slurm_cluster as cluster_mod
from testbeds.netns_cluster import NetnsCluster, start_netns
from testbeds.ssh_cluster import SshCluster


def need_slurm() -> None:
    """Skip without Slurm locally; under CI a missing Slurm is a failure."""
    missing = cluster_mod.missing_tools()
    if missing:
        reason = f"Slurm/munge tools missing: {', '.join(missing)} (scripts/install-system-deps.sh installs them)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    if os.geteuid() != 0:
        reason = "the private Slurm test cluster runs slurmd as root"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[cluster_mod.Cluster]:
    need_slurm()
    # Not under pytest's 0700 tmp dirs: munged wants o+x on every directory of its socket path.
    base = Path(tempfile.mkdtemp(prefix="dslaunch-slurm-"))
    try:
        started = cluster_mod.start(base)
    except Exception as exc:  # noqa: BLE001
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start the private Slurm cluster: {exc}")
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_env(slurm_cluster: cluster_mod.Cluster) -> dict[str, str]:
    """The test's environment, pointed at the private cluster, without any SLURM_* of our own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DSLAUNCH_"))}
    env.update(slurm_cluster.env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parents[1]), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def netns_cluster(ssh_cluster: SshCluster) -> Iterator[NetnsCluster]:
    cluster = start_netns(ssh_cluster)
    try:
        yield cluster
    finally:
        cluster.stop()
