from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.remote.cluster import SshCluster, start_cluster


@pytest.fixture(scope="module")
def ssh_cluster() -> Iterator[SshCluster]:
    """A private sshd on 127.0.0.2-5 (the remote tests' recipe), for MPI's own ssh launch."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)
