"""DeepSpeed command lines (from its docs and launcher tests) give the same plan as their v1 spelling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.plans import comparable, dry_run_json, plan_of

HOSTFILE = "worker-0 slots=4\nworker-1 slots=4\nworker-2 slots=2\nworker-3 slots=2\n"

# (DeepSpeed argv, v1 argv); "H" is replaced by the hostfile's path.
CASES: dict[str, tuple[list[str], list[str]]] = {
    "getting-started": (
        ["--hostfile=H", "train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"],
        ["--hostfile=H", "train.py", "--deepspeed", "--deepspeed_config", "ds_config.json"],
    ),
    "num-nodes": (["--num_nodes=2", "--hostfile", "H", "train.py"], ["--num-nodes", "2", "-H", "H", "train.py"]),
    "include-slots": (["-H", "H", "--include=worker-2:0,1", "train.py"], ["-H", "H", "-i", "worker-2:0,1", "train.py"]),
    "exclude": (
        ["-H", "H", "--exclude=worker-2:0@worker-3:0,1", "train.py"],
        ["-H", "H", "-e", "worker-2:0@worker-3:0,1", "train.py"],
    ),
    "help-example": (
        ["-H", "H", "-i", "worker-0@worker-1:0,2", "train.py"],
        ["-H", "H", "--include", "worker-0@worker-1:0,2", "train.py"],
    ),
    "one-gpu": (["--num_gpus=1", "train.py"], ["--nproc-per-node", "1", "train.py"]),
    "nodes-and-gpus": (
        ["-H", "H", "--num_nodes", "1", "--num_gpus", "2", "train.py"],
        ["-H", "H", "--num-nodes", "1", "--nproc-per-node", "2", "train.py"],
    ),
    "openmpi": (
        [
            "-H",
            "H",
            "--master_addr",
            "worker-0",
            "--master_port",
            "29501",
            "--launcher",
            "openmpi",
            "--launcher_args",
            "--mca btl_tcp_if_include eth0",
            "train.py",
        ],
        [
            "-H",
            "H",
            "--master-addr",
            "worker-0",
            "--master-port",
            "29501",
            "--launcher",
            "openmpi",
            "--launcher-args",
            "--mca btl_tcp_if_include eth0",
            "train.py",
        ],
    ),
    "no-python": (
        ["--no_local_rank", "--no_python", "/bin/bash", "-c", "echo 'hi there' \"$X\""],
        ["--no-python", "/bin/bash", "-c", "echo 'hi there' \"$X\""],
    ),
    "module-include-local": (
        ["--module", "-i", "localhost:1,3", "pkg.train", "--name", 'it\'s "quoted"'],
        ["-m", "--include", "localhost:1,3", "pkg.train", "--name", 'it\'s "quoted"'],
    ),
    "bind-cores": (
        ["--bind_cores_to_rank", "--bind_core_list", "0-3", "--num_gpus", "2", "train.py"],
        ["--bind-cores-to-rank", "--bind-core-list", "0-3", "--nproc-per-node", "2", "train.py"],
    ),
    "per-rank-logs": (
        ["--enable_each_rank_log", "/tmp/ds-logs", "train.py"],
        ["--log-dir", "/tmp/ds-logs", "train.py"],
    ),
    "ssh-port-venv": (
        ["-H", "H", "--ssh_port", "2222", "--venv_script", "/opt/venv/bin/activate", "train.py"],
        ["-H", "H", "--ssh-port", "2222", "--venv-script", "/opt/venv/bin/activate", "train.py"],
    ),
    "no-ssh": (
        ["-H", "H", "--no_ssh", "--node_rank", "1", "--master_addr", "worker-0", "train.py"],
        ["-H", "H", "--node-rank", "1", "--master-addr", "worker-0", "train.py"],
    ),
    "quiet": (["-q", "train.py"], ["--log-level", "error", "train.py"]),
    "log-level": (["--log_level", "DEBUG", "train.py"], ["--log-level", "debug", "train.py"]),
    "force-multi-mpi": (
        ["--force_multi", "--launcher", "openmpi", "--num_gpus", "1", "train.py"],
        ["--force-multi", "--launcher", "openmpi", "--nproc-per-node", "1", "train.py"],
    ),
    "defaults-spelled-out": (
        [
            "-H",
            "H",
            "--num_nodes",
            "-1",
            "--num_gpus",
            "-1",
            "--master_addr",
            "",
            "--master_port",
            "29500",
            "--enable_each_rank_log",
            "None",
            "--no_ssh_check",
            "train.py",
            "--local_rank",
            "5",
        ],
        ["-H", "H", "train.py", "--local_rank", "5"],
    ),
}

BASE = ["--dry-run", "--run-id", "compat"]


@pytest.fixture()
def hostfile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    path = tmp_path / "hostfile"
    path.write_text(HOSTFILE)
    return str(path)


def _subst(args: list[str], hostfile: str) -> list[str]:
    return [a.replace("H", hostfile) if a in ("H", "--hostfile=H") else a for a in args]


@pytest.mark.parametrize("case", sorted(CASES))
def test_deepspeed_spelling_gives_the_v1_plan(case: str, hostfile: str) -> None:
    ds_args, v1_args = CASES[case]
    ds = plan_of([*BASE, *_subst(ds_args, hostfile)])
    v1 = plan_of([*BASE, *_subst(v1_args, hostfile)])
    assert comparable(ds) == comparable(v1)


def test_include_keeps_the_given_device_order_and_the_hostfile_host_order(hostfile: str) -> None:
    plan = plan_of([*BASE, "-H", hostfile, "-i", "worker-1:2,0@worker-0:3", "train.py"])
    assert [(n.host, n.slots, n.ranks) for n in plan.nodes] == [
        ("worker-0", ("3",), (0,)),
        ("worker-1", ("2", "0"), (1, 2)),
    ]


def _warned(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "(DeepSpeed)" in line or "DeepSpeed's spelling" in line]


@pytest.mark.parametrize(("case", "warnings"), [("openmpi", 3), ("module-include-local", 0), ("no-python", 2)])
def test_cli_dry_run_json_is_identical(
    case: str, warnings: int, hostfile: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ds_args, v1_args = CASES[case]
    ds = dry_run_json([*BASE[1:], *_subst(ds_args, hostfile)])
    ds_err = capsys.readouterr().err
    v1 = dry_run_json([*BASE[1:], *_subst(v1_args, hostfile)])
    assert ds == v1
    warned = _warned(ds_err)
    assert len(warned) == len(set(warned)) == warnings, ds_err
    assert "DeepSpeed" not in capsys.readouterr().err


@pytest.mark.launch
def test_real_cli_dry_run_json_is_identical(hostfile: str) -> None:
    ds_args, v1_args = CASES["openmpi"]
    env = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    ds = run_cli([*BASE, "--json", *_subst(ds_args, hostfile)], env=env)
    v1 = run_cli([*BASE, "--json", *_subst(v1_args, hostfile)], env=env)
    assert ds.returncode == 0 and v1.returncode == 0, ds.stderr + v1.stderr
    assert json.loads(ds.stdout) == json.loads(v1.stdout)
    warned = _warned(ds.stderr)
    assert len(warned) == len(set(warned)) == 3, ds.stderr
    assert "DeepSpeed" not in v1.stderr
