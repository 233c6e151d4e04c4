"""One launcher per node agrees on the run id without being told (issue 22, item 11).

torchrun gives every rank of a job the same ``TORCHELASTIC_RUN_ID`` (``--rdzv-id``, default ``none``); each of
dslaunch's per-node launchers drew its own. Now the id is ``--run-id``/``--rdzv-id``/``PET_RDZV_ID`` when given,
else derived from what every node of the job is told alike; a random one only where one launcher plans every node.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from dslaunch import nesting
from tests.helpers import DSLAUNCH, SCRIPTS
from tests.plans import cli_error, plan_of
from tests.pods.pods import free_port_pair

SCRIPT = str(SCRIPTS / "pod_env.py")
POD = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
CLEAN = {"DSLAUNCH_RUN_ID": None, "PET_RDZV_ID": None, "PBS_JOBID": None, nesting.CHAIN_VAR: None}


def _pods(tmp_path: Path, extra: dict[str, str]) -> list[dict[str, str]]:
    """Node 0 and node 1 of one job on this machine (one job: their launchers end together, tests/pods/
    test_pods.py); each node's sweep keeps to its own NODE_RANK (tests/oslib/test_procs.py)."""
    port = free_port_pair()
    env = {k: v for k, v in os.environ.items() if k not in CLEAN} | {
        "OUT_DIR": str(tmp_path),
        "CUDA_VISIBLE_DEVICES": "",
    }
    argv = [*DSLAUNCH, *POD, "--master-port", str(port)]
    pods = [
        subprocess.Popen(
            [*argv, "--node-rank", str(node), SCRIPT],
            env={**env, **extra},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    first = pods[0].communicate(timeout=90)
    second = pods[1].communicate(timeout=90)
    assert [p.returncode for p in pods] == [0, 0], (first[1], second[1])
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]


@pytest.mark.launch
def test_every_rank_of_both_nodes_gets_one_run_id(tmp_path: Path) -> None:
    ranks = _pods(tmp_path, {})
    ids = {(e["DSLAUNCH_RUN_ID"], e["TORCHELASTIC_RUN_ID"]) for e in ranks}
    assert len(ids) == 1, ids
    run_id, torch_id = ids.pop()
    assert run_id == torch_id and [e["NODE_RANK"] for e in ranks] == ["0", "0", "1", "1"]


@pytest.mark.launch
def test_torchruns_rdzv_id_is_every_ranks_run_id(tmp_path: Path) -> None:
    ranks = _pods(tmp_path, {"PET_RDZV_ID": "abc"})
    assert {(e["DSLAUNCH_RUN_ID"], e["TORCHELASTIC_RUN_ID"]) for e in ranks} == {("abc", "abc")}


def _node_plan_id(node: int, *extra: str, env: dict[str, str | None] | None = None) -> str:
    args = [*POD, "--master-port", "29400", "--node-rank", str(node), *extra, "--dry-run", "train.py", "--lr", "1"]
    return plan_of(args, env={**CLEAN, **(env or {})}).run_id


def test_the_derived_id_is_the_same_on_every_node_and_differs_between_jobs() -> None:
    first = _node_plan_id(0)
    assert first == _node_plan_id(1) == _node_plan_id(1, env={"HOSTNAME": "elsewhere"})
    others = {
        _node_plan_id(0, "--nproc-per-node", "3"),
        _node_plan_id(0, "--master-addr", "10.0.0.2"),
        _node_plan_id(0, "--master-port", "29401"),
        _node_plan_id(0, env={"PBS_JOBID": "77.pbs"}),
        _node_plan_id(0, env={nesting.CHAIN_VAR: "outer"}),
        plan_of([*POD, "--master-port", "29400", "--node-rank", "0", "--dry-run", "train.py", "--lr", "2"]).run_id,
    }
    assert first not in others and len(others) == 6


@pytest.mark.parametrize("spelling", ["--run-id", "--rdzv-id", "--rdzv_id"])
def test_a_given_id_wins_in_torchruns_spellings(spelling: str) -> None:
    assert _node_plan_id(1, spelling, "given-1") == "given-1"
    assert _node_plan_id(1, env={"PET_RDZV_ID": "pet-1"}) == "pet-1"


def test_one_launcher_for_every_node_still_draws_a_random_id() -> None:
    ids = {plan_of(["--nproc-per-node", "2", "--dry-run", "x.py"], env=CLEAN).run_id for _ in range(3)}
    assert len(ids) == 3


def test_a_bad_given_id_is_refused() -> None:
    code, err = cli_error(["--rdzv-id", "has space", "--dry-run", "x.py"], env=CLEAN)
    assert code == 2 and "--run-id" in err
