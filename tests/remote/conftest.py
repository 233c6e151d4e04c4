from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.remote.cluster import SshCluster, start_cluster


@pytest.fixture(scope="session")
def ssh_cluster() -> Iterator[SshCluster]:
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)
