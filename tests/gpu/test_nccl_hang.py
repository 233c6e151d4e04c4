"""--hang-timeout on an NCCL rank: the engine's trace thread writes torch's flight recorder dump, which torch's own
reader parses, showing the collectives that completed and the one the rank hangs in (docs/hangs.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.launch import SCRIPTS, launch

pytestmark = [pytest.mark.gpu, pytest.mark.torch, pytest.mark.launch]
HANG = str(SCRIPTS / "nccl_hang.py")
READ_TRACE = str(SCRIPTS / "read_trace.py")


@pytest.mark.timeout(150)
def test_a_hung_nccl_rank_leaves_a_flight_recorder_dump_torch_can_read(tmp_path: Path) -> None:
    run_id = f"gpuhang{os.getpid()}"
    logs = tmp_path / "logs"
    args = ["--nproc-per-node", "1", "--master-port", "0", "--run-id", run_id, "--log-dir", str(logs)]
    result = launch([*args, "--hang-timeout", "5", HANG], timeout=140)
    text = result.stdout + result.stderr
    assert result.returncode == 124, text
    assert "[rank0]: ready sum=1 backend=cuda:nccl,cpu:gloo" in result.stdout, text
    prefix = f"dslaunch-{run_id}.nccl-trace.rank"
    trace = logs / f"{prefix}0"
    assert f"dslaunch: NCCL flight recorder trace written to {trace}" in text, text
    named = "dslaunch: NCCL flight recorder traces (each rank's line above says if it wrote one): "
    assert f"{named}localhost:{trace}" in text, text
    assert trace.stat().st_size > 0

    read = subprocess.run([sys.executable, READ_TRACE, str(trace), prefix], capture_output=True, text=True, timeout=60)
    assert read.returncode == 0, read.stderr
    dump = json.loads(read.stdout.strip().splitlines()[-1])
    print(f"read by {dump['reader']}: version {dump['version']}, {len(dump['entries'])} entries")
    assert dump["rank"] in (0, None), dump  # read_dump takes the rank from the file name; pickle.load has none
    reduces = [e for e in dump["entries"] if "all_reduce" in str(e["name"]) or "allreduce" in str(e["name"])]
    assert len(reduces) >= 4, dump  # the three before "ready", then the one queued behind the kernel
    assert all(e["state"] == "completed" for e in reduces[:-1]), dump
    assert reduces[-1]["state"] in ("scheduled", "started"), dump
