"""DeepSpeed 0.19.8's deepspeed.initialize (ZeRO 0 and 2, mpu=dslaunch.compat.mpu) runs under dslaunch as under
torchrun: the same weights after the same steps (2 gloo ranks on the CPU accelerator)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH, SCRIPTS

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api]
SCRIPT = str(SCRIPTS / "ds_train.py")
# The first run JIT-builds DeepSpeed's shared-memory allreduce op (about a minute, then cached).
ENV = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


IDLE_S = 300  # a build writes its objects far more often than this: a lock in a folder this idle is left over


def _clear_stale_build_locks() -> None:
    """torch waits forever for the lock file of a JIT build whose holder died, so every later run would hang to
    its timeout: a test run stopped mid-build leaves one, and so did a finished run here once (a lock of the last
    job's, 09:57 on 2026-12-03, not yet explained). Remove a lock when nothing in its build folder changed lately."""
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
    for lock in [*root.glob("*/deepspeed*/lock"), *root.glob("deepspeed*/lock")]:
        try:
            newest = max(p.stat().st_mtime for p in lock.parent.iterdir())
            if time.time() - newest > IDLE_S:
                lock.unlink()
        except (OSError, ValueError):
            pass


def _weights(launcher: list[str], stage: int) -> str:
    done = subprocess.run(
        [*launcher, SCRIPT],
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, **ENV, "ZERO": str(stage)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.findall(rf"rank=(\d) stage={stage} dp=2 wsum=(-?[0-9]+\.[0-9]{{4}})", done.stdout)
    assert sorted(rank for rank, _ in found) == ["0", "1"], done.stdout[-3000:]
    assert len({w for _, w in found}) == 1, found  # both ranks hold the same model
    return found[0][1]


@pytest.mark.timeout(900)  # three DeepSpeed jobs, and on a new torch the op's JIT build first (minutes under load)
def test_zero_0_and_2_train_as_under_torchrun() -> None:
    pytest.importorskip("deepspeed")
    _clear_stale_build_locks()
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "2"]
    dslaunch = [*DSLAUNCH, "--nproc-per-node", "2", "--master-port", "0"]
    expected = _weights(torchrun, 2)
    assert _weights(dslaunch, 2) == expected
    assert _weights(dslaunch, 0) == expected  # plain data parallel reaches the same weights
