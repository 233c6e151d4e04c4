"""One stop step for the whole job over ssh and pdsh (2 hosts of the loopback test bed, 2 lockstep ranks each),
with one-attempt agents and with agents that live for the job (--max-restarts): SIGTERM to the launcher, and every
rank saves one and the same step (docs/stopping.md)."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import wait_until_gone
from tests.runners.remote.launch import RUNNERS, base_args, start
from tests.runners.stop_steps import RANKS, TORCH_RANKS, stop_and_check

pytestmark = [pytest.mark.launch, pytest.mark.cluster]


def _args(cluster: SshCluster, runner: str, tmp_path: Path, *extra: str) -> tuple[str, list[str]]:
    run_id = f"{runner}stop{uuid.uuid4().hex[:8]}"
    args = [*base_args(cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--master-port", "0",
            "--export", f"OUT_DIR={tmp_path}", *extra]  # fmt: skip
    return run_id, args


@pytest.mark.parametrize("lives", [False, True], ids=["one attempt", "agents live for the job"])
@pytest.mark.parametrize("runner", RUNNERS)
def test_sigterm_to_the_launcher_stops_both_hosts_ranks_at_one_step(
    ssh_cluster: SshCluster, tmp_path: Path, runner: str, lives: bool
) -> None:
    run_id, args = _args(ssh_cluster, runner, tmp_path, *(["--max-restarts", "1"] if lives else []))
    proc = start([*args, RANKS], cwd=tmp_path)
    stop_and_check(proc, tmp_path, range(4), lambda: proc.send_signal(signal.SIGTERM))
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.torch
@pytest.mark.parametrize("runner", RUNNERS)
def test_four_gloo_ranks_on_two_hosts_save_one_step(ssh_cluster: SshCluster, tmp_path: Path, runner: str) -> None:
    run_id, args = _args(ssh_cluster, runner, tmp_path, "--preload", "torch")
    proc = start([*args, TORCH_RANKS], cwd=tmp_path)
    stop_and_check(proc, tmp_path, range(4), lambda: proc.send_signal(signal.SIGTERM))
    assert wait_until_gone(run_id, 10) == []
