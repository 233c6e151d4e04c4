"""--max-restarts over ssh and pdsh: every node is stopped and started again, with the attempt number."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS
from tests.runners.remote.launch import RUNNERS, base_args, run, wait_until_gone

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

FLAKY = str(SCRIPTS / "flaky.py")


@pytest.mark.parametrize("runner", RUNNERS)
def test_fails_on_node2_first_then_succeeds(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    run_id = f"rs{runner}{os.getpid()}"
    res = run(
        [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, "--max-restarts", "2",
         "--restart-delay", "0", FLAKY, str(tmp_path), "3", "2", "7"],
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    seen = [tuple(int(x) for x in line.split()) for line in (tmp_path / "attempts.txt").read_text().splitlines()]
    assert sorted(r for a, r, _m in seen if a == 2) == [0, 1, 2, 3]
    assert {a for a, _r, _m in seen} == {0, 1, 2} and {m for _a, _r, m in seen} == {2}
    assert res.stderr.count("rank 3 (local_rank 1, node 1) on host node2 exited with code 7") == 2
    assert "the job ran 3 times (--max-restarts 2)" in res.stderr
    assert wait_until_gone(run_id, 3) == []
