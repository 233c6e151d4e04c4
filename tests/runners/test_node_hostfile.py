"""DeepSpeed's one launcher per node: ``-H hostfile --no_ssh --node_rank K`` on every node (how DeepSpeed runs
under Kubernetes and other schedulers). Each launcher starts its own node's agent, never ssh, and the launchers
join the pods' control channel (node 0's listens on --master-port + 1): one job, fail-fast, one exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import wait_until_gone
from tests.plans import cli_error, dry_run_output
from tests.pods.pods import free_port_pair
from tests.runners.remote.launch import SCRIPT, clean_overlay, records, start

SECRET = {"DSLAUNCH_JOB_SECRET": "per-node-test-secret"}


def _hostfile(tmp_path: Path) -> Path:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("nowhere-a slots=2\nnowhere-b slots=2\n")  # unresolvable: any ssh would fail
    return hostfile


def _both(tmp_path: Path, port: int, run_id: str, *script: str) -> list[tuple[int, str, str]]:
    hostfile = _hostfile(tmp_path)
    common = ["-H", str(hostfile), "--no_ssh", "--master_addr", "127.0.0.1", "--master_port", str(port)]
    common += ["--run-id", run_id, "--shutdown-timeout", "2", SCRIPT, *script]
    launchers = [
        start([*common[:3], "--node_rank", str(n), *common[3:]], cwd=tmp_path, env={**clean_overlay(), **SECRET})
        for n in (0, 1)
    ]
    results = []
    for proc in launchers:
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        results.append((proc.returncode, out, err))
    return results


@pytest.mark.launch
def test_each_node_runs_its_own_ranks_as_one_job_and_never_opens_ssh(tmp_path: Path) -> None:
    run_id = "dsnode-ok-" + tmp_path.name[-8:]
    results = _both(tmp_path, free_port_pair(), run_id, "echo")
    for code, _out, err in results:
        assert code == 0, err  # the hosts do not resolve: an ssh to either would have failed the job
    recs = [records(out) for _code, out, _err in results]
    assert [(r["rank"], r["world"], r["node"]) for r in recs[0]] == [(0, 4, 0), (1, 4, 0)]
    assert [(r["rank"], r["world"], r["node"]) for r in recs[1]] == [(2, 4, 1), (3, 4, 1)]
    assert all(r["master"] == "127.0.0.1" for rs in recs for r in rs)
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.launch
def test_a_rank_failing_on_one_node_stops_the_other_and_both_exit_with_its_code(tmp_path: Path) -> None:
    """Before the channel, node 1's rank exited 3 while node 0's ranks ran on and node 0 exited 0."""
    run_id = "dsnode-fail-" + tmp_path.name[-8:]
    results = _both(tmp_path, free_port_pair(), run_id, "fail", str(tmp_path), "3", "3")
    assert [code for code, _out, _err in results] == [3, 3], [err for *_x, err in results]
    for _code, _out, err in results:
        assert "rank 3 (local_rank 1, node 1) on host nowhere-b exited with code 3 [root cause" in err, err
    assert wait_until_gone(run_id, 10) == []


def test_the_dry_run_names_node_0s_address_and_port(tmp_path: Path) -> None:
    hostfile = _hostfile(tmp_path)
    args = ["-H", str(hostfile), "--no_ssh", "--node_rank", "1", "--master_addr", "10.1.2.3", "--master_port", "29600"]
    out = dry_run_output([*args, "train.py"])
    assert "this launcher connects to node 0 at 10.1.2.3:29601" in out, out
    assert " at :0" not in out
    node0 = dry_run_output([*args[:3], "--node_rank", "0", *args[5:], "train.py"])
    assert "this launcher listens on port 29601" in node0, node0


def test_a_node_rank_outside_the_hostfile_or_no_fixed_port_is_refused(tmp_path: Path) -> None:
    hostfile = _hostfile(tmp_path)
    code, err = cli_error(["--hostfile", str(hostfile), "--node-rank", "2", "x.py"])
    assert code == 2 and "valid node ranks are 0..1" in err
    code, err = cli_error(["--hostfile", str(hostfile), "--node-rank", "0", "--master-port", "0", "x.py"])
    assert code == 2 and "fixed --master-port" in err
