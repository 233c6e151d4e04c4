"""Fixtures of the remote tests: two "hosts" in network namespaces (per module: each test file starts its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbeds.netns_cluster import NetnsCluster, start_netns
from testbeds.ssh_cluster import SshCluster


@pytest.fixture(scope="module")
def netns_cluster(ssh_cluster: SshCluster) -> Iterator[NetnsCluster]:
    cluster = start_netns(ssh_cluster)
    try:
        yield cluster
    finally:
        cluster.stop()
