"""Real gloo ranks under dslaunch: every dim and view checked with all_reduce(rank), group counts,
bad and inconsistent specs failing on every rank quickly, the engine API and the compat getters."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api]
ENV = {"DSLAUNCH_PG_TIMEOUT": "30"}

SPECS_4 = [
    "dp=2,tp=2",
    "dp_replicate=2,dp_shard=2",
    "pp=2,dp=2",
    "cp=2,dp=-1",
    "sp=2,tp=2",
    "tp=4",
    "dp=-1",
    "dp=2,tp=2,ep=2",
    "dp=4,ep=2",
    "dp=2,tp=2,ep=4,etp=1",
    "dp_replicate=2,sp=2",
    "pp=2,tp=2",
    "dp=2,tp=2,ep=2,etp=1",
    "dp=2,tp=2,etp=1",
    "pp=4",
]
SPECS_8 = [
    "pp=2,dp=2,tp=2",
    "dp=2,tp=4",
    "dp=4,sp=2",
    "dp_replicate=2,dp_shard=4",
    "dp_replicate=2,dp=-1,cp=2",
    "dp_replicate=2,dp_shard=2,tp=2,ep=2",
    "dp_replicate=2,dp_shard=2,tp=2,ep=2,etp=1",
    "pp=2,dp=2,tp=2,ep=2",
]


def _all_checked(out: str, nproc: int, specs: list[str]) -> None:
    lines = re.findall(r"rank (\d+): OK (\d+) checks", out)
    assert sorted(int(r) for r, _ in lines) == list(range(nproc)), out
    assert all(int(n) > 10 * len(specs) for _, n in lines)


def _check(nproc: int, specs: list[str]) -> None:
    result = run_cli(
        ["--nproc-per-node", str(nproc), "--master-port", "0", str(SCRIPTS / "check_groups.py"), *specs],
        timeout=150,
        env=ENV,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    _all_checked(result.stdout, nproc, specs)


def test_every_dim_and_view_on_8_ranks() -> None:
    _check(8, SPECS_8)


def test_bad_specs_fail_on_every_rank_then_engine_api_and_every_dim_on_4_ranks() -> None:
    start = time.monotonic()
    result = run_cli(
        [
            "--nproc-per-node",
            "4",
            "--master-port",
            "0",
            "--mesh",
            "dp=2,tp=2",
            "--log-level",
            "comm=debug,mesh=info",
            "--wall-clock-breakdown",
            "--log-ranks",
            "all",
            str(SCRIPTS / "engine_api.py"),
            *SPECS_4,
        ],
        timeout=150,
        env=ENV,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    for case, message in [
        ("same-bad", "cannot infer dp_shard: WORLD_SIZE(4) is not divisible by tp(3) = 3"),
        ("different", "ranks disagree on the mesh spec: rank 0 has 'dp_shard=-1,tp=2 (torch 2."),
        ("different", "but rank 3 has 'dp_shard=-1,tp=4 (torch 2."),
        ("one-bad", "rank 1 has '<invalid: mesh: cannot infer dp_shard"),
    ]:
        found = re.findall(rf"rank (\d): {case} failed after ([\d.]+)s: (.*)", out)
        assert sorted(int(r) for r, _, _ in found) == [0, 1, 2, 3], (case, out)
        assert all(message in text and float(secs) < 30 for _, secs, text in found), found
    assert sorted(re.findall(r"rank (\d): engine api OK", out)) == ["0", "1", "2", "3"], out
    _all_checked(out, 4, SPECS_4)
    records = out + result.stderr
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier"):
        assert re.search(rf"op={op} dim=\w+ group_size=\d", records), op
    assert "mesh: mesh dp_shard=2 tp=2 | tp_dp=4 | new groups=4 | from DSLAUNCH_MESH" in records
    assert len(re.findall(r"timers: wall clock breakdown step=1 forward_ms=\d", records)) == 4, records[-2000:]
    assert time.monotonic() - start < 120


PLAIN = """
import dslaunch, torch
from dslaunch.compat import get_data_parallel_group
from dslaunch.mesh import MeshConfigError, parse_spec, resolve
from dslaunch.bootstrap.mesh_build import check_torch
from torch.distributed.device_mesh import DeviceMesh

e = dslaunch.engine(mesh="dp=-1")
assert e.world_size == 1 and e.size("tp") == 1 and e.size("dp") == 1, e
assert e.comm.all_reduce(torch.ones(1), axis="dp").item() == 1
assert get_data_parallel_group() is not None
check_torch(resolve(parse_spec("dp=4,tp=2,ep=4,etp=1"), 8))  # this torch has _flatten and _unflatten
del DeviceMesh._unflatten  # an older torch
try:
    check_torch(resolve(parse_spec("dp=4,tp=2,ep=4,etp=1"), 8))
    raise SystemExit("no error without DeviceMesh._unflatten")
except MeshConfigError as exc:
    assert "needs torch >= 2.10 for the expert dims efsdp=2 ep=4 (DeviceMesh._unflatten)" in str(exc), exc

import functools
import torch.distributed.device_mesh as dm
from dslaunch.bootstrap.mesh_build import bootstrap
real_init = DeviceMesh.__init__
@functools.wraps(real_init)
def init_without_names(self, *args, **kwargs):  # a torch whose meshes keep no _flatten_mapping
    real_init(self, *args, **kwargs)
    del self._flatten_mapping
DeviceMesh.__init__ = init_without_names
try:
    bootstrap("dp=-1", 1, "cpu")  # fails in the guard, before any group: the next build is not refused
    raise SystemExit("no error without DeviceMesh._flatten_mapping")
except MeshConfigError as exc:
    assert str(exc).startswith(f"mesh: torch {torch.__version__} has no DeviceMesh._flatten_mapping: "), exc
DeviceMesh.__init__ = real_init
def broken(*args, **kwargs):
    raise RuntimeError("boom")
dm.init_device_mesh = broken  # group creation failing part-way
for expected in ("boom", "an earlier mesh build in this process failed (RuntimeError: boom)"):
    try:
        bootstrap("dp=-1", 1, "cpu")
        raise SystemExit("bootstrap did not fail")
    except (RuntimeError, MeshConfigError) as exc:
        assert expected in str(exc), exc
print("ok", e.coordinate["dp"])
"""


def test_plain_python_world_of_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    result = subprocess.run(
        [sys.executable, "-c", PLAIN], capture_output=True, text=True, timeout=60, env=env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok 0"


def _demo_losses(nproc: int, mesh: str) -> tuple[list[float], str]:
    root = Path(__file__).resolve().parents[2]
    result = run_cli(
        [
            "--nproc-per-node",
            str(nproc),
            "--master-port",
            "0",
            "--mesh",
            mesh,
            str(root / "examples" / "train.py"),
            "--steps",
            "6",
        ],
        timeout=150,
        env=ENV,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = re.findall(
        rf"step (\d): all_reduce over {nproc} ranks = {nproc * (nproc - 1) // 2} \(ok\) \| "
        r"loss ([\d.]+) \| forward .* ms  backward",
        result.stdout,
    )
    assert [int(s) for s, _ in steps] == [1, 2, 3, 4, 5, 6], result.stdout
    return [float(loss) for _, loss in steps], result.stdout


def test_demo_trains_with_tensor_and_data_parallel() -> None:
    """The `make demo` command: TP over tp, FSDP2 over dp, loss going down, timers shown. Same data per dp
    rank and the same math, so the losses must equal those of data parallel alone on 2 ranks."""
    losses, out = _demo_losses(4, "dp=2,tp=2")
    assert sum(losses[-3:]) < sum(losses[:3]), losses
    assert "mesh dp_shard=2 tp=2" in out
    reference, _ = _demo_losses(2, "dp=2")
    assert losses == pytest.approx(reference, abs=2e-4), (losses, reference)
