"""The console collapse across hosts over a real sshd: 256 trivial ranks on 4 hosts (64 each), ssh and pdsh.

Remote agents do not collapse; the launcher does, over every node's lines (output/collapse_launcher.py). The ranks
wait at a gate (tests/output/collapse_check.py), so every host's copies come within the window.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.output.collapse_check import SAME, check_failure_order, every_rank_once, gated_run, lines_of, own
from tests.runners.remote.launch import RUNNERS, base_args, clean_env

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

HOSTS = ["node1", "node2", "node3", "node4"]
PER_HOST = 64
RANKS = len(HOSTS) * PER_HOST


def run_on_hosts(cluster: SshCluster, runner: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [*base_args(cluster, runner, HOSTS, slots=PER_HOST), *extra]
    return gated_run(args, tmp_path, RANKS, clean_env())


@pytest.mark.parametrize("runner", RUNNERS)
def test_one_warning_from_256_ranks_on_4_hosts_is_at_most_two_lines(
    runner: str, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    result = run_on_hosts(ssh_cluster, runner, tmp_path, "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = lines_of(result.stderr, SAME)
    assert len(lines) <= 2 and every_rank_once(lines, RANKS), result.stderr[-3000:]
    for rank in range(RANKS):
        assert (tmp_path / "logs" / f"rank{rank}.stderr.log").read_text() == SAME + "\n"


@pytest.mark.parametrize("runner", RUNNERS)
def test_256_different_lines_on_4_hosts_stay_256(runner: str, ssh_cluster: SshCluster, tmp_path: Path) -> None:
    result = run_on_hosts(ssh_cluster, runner, tmp_path, "--export", "LINE=own")
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(RANKS):
        assert lines_of(result.stderr, own(rank)) == [[rank]], rank


def test_the_off_switch_prints_every_copy_from_every_host(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    result = run_on_hosts(ssh_cluster, "ssh", tmp_path, "--no-collapse-output")
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(lines_of(result.stderr, SAME)) == [[rank] for rank in range(RANKS)]


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_failing_ranks_line_shows_before_the_teardown_and_the_summary_remote(
    runner: str, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """Rank 70 (on node2) prints the others' text 0.3 s after them and exits 3: its copy is out before the ranks
    stopped for it say so, and before the summary."""
    result = run_on_hosts(ssh_cluster, runner, tmp_path, "--export", "FAIL_RANK=70", "--shutdown-timeout", "10")
    assert result.returncode == 3, result.stderr[-3000:]
    assert every_rank_once(lines_of(result.stderr, SAME), RANKS), result.stderr[-3000:]
    check_failure_order(result.stderr, 70, range(64, 128))
