"""Suite-wide set-up: no leaking Slurm job, and one private sshd shared by the remote and MPI tests."""

from __future__ import annotations

import os
import shutil
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
