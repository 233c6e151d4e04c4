"""A launcher's stdout that nobody reads (``dslaunch ... | sleep 60``) never holds up fail-fast, on any runner.

Issue 22, item 1: 2 hosts x 2 ranks, rank 0 floods, rank 3 exits 9, the other ranks print now and then. Every
runner must exit 9 within seconds with the summary, and leave nothing running. Control events never wait behind
output: the ssh reader keeps reading each channel (output it cannot pass on yet waits in memory, then on disk).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import DSLAUNCH, SCRIPTS
from tests.runners.remote.launch import RUNNERS, base_args, clean_env

pytestmark = [pytest.mark.launch]

SCRIPT = str(SCRIPTS / "flood_one_fail_other.py")
SUMMARY = b"rank 3 (local_rank 1, node 1) on host "


def _run_unread(args: list[str], tmp_path: Path, *, merge_stderr: bool = False) -> tuple[int, bytes, float]:
    """(exit code, stderr, seconds from rank 3's exit to the launcher's), stdout a pipe nobody reads."""
    stamp = tmp_path / "stamp"
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [*DSLAUNCH, *args, "--export", f"STAMP={stamp}", SCRIPT],
        stdout=write_end,
        stderr=write_end if merge_stderr else subprocess.PIPE,
        env=clean_env(),
        cwd=tmp_path,
    )
    os.close(write_end)
    try:
        try:
            _, err = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            pytest.fail(f"the launcher was still running 40 s later: {(err or b'')[-2000:]!r}")
        ended = time.time()
    finally:
        os.close(read_end)
    return proc.returncode, err or b"", ended - float(stamp.read_text())


def test_local_reference(tmp_path: Path) -> None:
    code, err, late = _run_unread(["--nproc-per-node", "4"], tmp_path)
    assert code == 9, err
    assert late < 5.0
    assert b"rank 3 (local_rank 3, node 0)" in err


@pytest.mark.cluster
@pytest.mark.parametrize("runner", RUNNERS)
def test_an_unread_stdout_cannot_hold_up_fail_fast(runner: str, ssh_cluster: SshCluster, tmp_path: Path) -> None:
    args = base_args(ssh_cluster, runner, ["node1", "node2"], slots=2)
    code, err, late = _run_unread(args, tmp_path)
    assert code == 9, err[-3000:]
    assert late < 5.0, f"exited {late:.1f} s after rank 3"
    assert SUMMARY + b"node2 exited with code 9" in err, err[-3000:]


@pytest.mark.cluster
@pytest.mark.parametrize("runner", RUNNERS)
def test_unread_stdout_and_stderr_cannot_hold_up_fail_fast(
    runner: str, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """``2>&1 | sleep 60``: the ranks' stderr relay cannot write either."""
    args = base_args(ssh_cluster, runner, ["node1", "node2"], slots=2)
    code, _, late = _run_unread(args, tmp_path, merge_stderr=True)
    assert code == 9
    assert late < 5.0, f"exited {late:.1f} s after rank 3"
