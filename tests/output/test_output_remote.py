"""Output over ssh and pdsh: the agent's stdout mixes events and output; the launcher cuts them apart."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import DSLAUNCH, SCRIPTS
from tests.runners.remote.launch import RUNNERS, base_args, clean_env, run

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

SCRIPT = str(SCRIPTS / "long_and_forged.py")


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_long_line_arrives_whole_and_a_forged_event_is_text(
    runner: str, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """pdsh cuts lines over 128 KiB (and would lose the head with the prefix): the agent's 64 KiB pieces pass."""
    args = base_args(ssh_cluster, runner, ["node1"], slots=1)
    result = run([*args, "--export", "EXIT_CODE=3", SCRIPT], cwd=tmp_path)
    assert result.returncode == 3, result.stderr  # the rank's own code, not the forged 99
    prefix = "[rank0]: "  # one node: no host in the prefix
    lines = result.stdout.splitlines()
    pieces = [line for line in lines if not line.startswith(prefix + "@dslaunch-event")]
    assert all(line.startswith(prefix) and len(line) <= len(prefix) + 64 * 1024 for line in pieces)
    assert "".join(line[len(prefix) :] for line in pieces) == "".join(f"{i:07d}" for i in range(300_000 // 7))
    assert len(lines) == len(pieces) + 1, "the forged event line was not printed as output"
    assert "rank 0 (local_rank 0, node 0) on host node1 exited with code 3" in result.stderr
    assert "rank 9" not in result.stderr


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_reader_that_never_reads_cannot_delay_fail_fast_remote(
    runner: str, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """``dslaunch ... | sleep 30`` over ssh and pdsh: node 1 floods stdout, rank 1 on node 2 exits 7."""
    stamp = tmp_path / "stamp"
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"], slots=1), "--export", f"STAMP={stamp}"]
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [*DSLAUNCH, *args, str(SCRIPTS / "flood_then_fail.py")],
        stdout=write_end,
        stderr=subprocess.PIPE,
        env=clean_env(),
        cwd=tmp_path,
    )
    os.close(write_end)
    try:
        _, err = proc.communicate(timeout=60)
        ended = time.time()
    finally:
        os.close(read_end)
    assert proc.returncode == 7, err
    assert ended - float(stamp.read_text()) < 5.0
    assert b"rank 1 (local_rank 0, node 1) on host node2 exited with code 7" in err
