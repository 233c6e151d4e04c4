"""Two "pods" the way a Kubeflow PyTorchJob starts them: one dslaunch per pod, configured only by torchrun's
PET_* variables (issue 13, item 7). Here both pods are on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import click
import pytest

from tests.helpers import DSLAUNCH, SCRIPTS
from tests.plans import cli_error, dry_run_json
from tests.pods.pods import free_port_pair


def _pod(node_rank: int, port: int, script: str, extra: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PET_NNODES": "2",
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": str(port),
        "CUDA_VISIBLE_DEVICES": "",
        "DSLAUNCH_PG_TIMEOUT": "30",
        **(extra or {}),
    }
    return subprocess.Popen([*DSLAUNCH, script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


POD = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "2"}
POD |= {"PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "29400", "CUDA_VISIBLE_DEVICES": ""}
INCOMPLETE = [
    ({"PET_NNODES": "1:4"}, "give --rdzv-endpoint HOST[:PORT]"),
    ({"PET_NNODES": "2"}, "give its --node-rank"),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_PORT": "29400"}, "give --master-addr"),
    ({"PET_NNODES": "2", "PET_NODE_RANK": "2", "PET_MASTER_ADDR": "h", "PET_MASTER_PORT": "1"}, "0..1"),
]


@pytest.mark.launch
def test_the_real_cli_reads_pet_variables_and_refuses_incomplete_ones() -> None:
    done = subprocess.run(
        [*DSLAUNCH, "--dry-run", "--json", "x.py"], capture_output=True, text=True, env={**os.environ, **POD}
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["world_size"] == 4
    env, needle = INCOMPLETE[1]
    done = subprocess.run([*DSLAUNCH, "--dry-run", "x.py"], capture_output=True, text=True, env={**os.environ, **env})
    assert done.returncode == 2 and needle in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_pet_variables_alone_plan_one_node_of_the_job() -> None:
    plan = dry_run_json(["x.py"], env=POD)
    assert plan["launcher"] == "node" and plan["world_size"] == 4
    assert (plan["master_addr"], plan["master_port"]) == ("10.0.0.1", 29400)
    assert [n["ranks"] for n in plan["nodes"]] == [[0, 1], [2, 3]]
    over = dry_run_json(["--master-port", "29401", "x.py"], env=POD)
    assert over["master_port"] == 29401  # the command line wins


@pytest.mark.parametrize(("env", "needle"), INCOMPLETE)
def test_incomplete_pod_settings_say_what_is_missing(env: dict[str, str], needle: str) -> None:
    code, err = cli_error(["--dry-run", "x.py"], env=env)
    assert code == 2 and needle in err, err


@pytest.mark.launch
@pytest.mark.torch
def test_two_pods_run_one_four_rank_job_and_fail_as_one() -> None:
    port = free_port_pair()
    script = str(SCRIPTS / "pod_ranks.py")
    pods = [_pod(0, port, script), _pod(1, port, script)]
    outs = [p.communicate(timeout=120) for p in pods]
    assert [p.returncode for p in pods] == [0, 0], [err for _, err in outs]
    lines = sorted(line.split("]: ", 1)[1] for out, _ in outs for line in out.splitlines() if "sum=" in line)
    assert lines == [f"rank={r} node={r // 2} world=4 sum=10" for r in range(4)]

    port = free_port_pair()
    pods = [_pod(0, port, script, {"FAIL_RANK": "3"}), _pod(1, port, script, {"FAIL_RANK": "3"})]
    started = time.monotonic()
    codes = [p.wait(timeout=120) for p in pods]
    took = time.monotonic() - started
    errs = [p.communicate()[1] for p in pods]
    assert codes == [7, 7], errs  # the failing rank's code on both pods (their control channel)
    assert took < 25, f"the job took {took:.0f} s to end"


def test_the_docs_table_of_torchrun_variables_matches_the_options() -> None:
    from dslaunch.cli import command

    text = (Path(__file__).parents[2] / "docs" / "multinode.md").read_text()
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith("| `PET_")]
    documented = {var.split("`")[1]: opt.strip().strip("`") for var, opt in rows}
    actual = {
        env: next(o for o in p.opts if o.startswith("--"))
        for p in command.build_command().params
        if isinstance(p, click.Option) and isinstance(p.envvar, list)
        for env in p.envvar
        if env.startswith("PET_")
    }
    assert documented == actual
