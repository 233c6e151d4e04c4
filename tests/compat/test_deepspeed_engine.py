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

from tests.helpers import DSLAUNCH

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api]
SCRIPT = str(Path(__file__).parent / "scripts" / "ds_train.py")
# The first run JIT-builds DeepSpeed's shared-memory allreduce op (about a minute, then cached).
ENV = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


STALE_LOCK_S = 15 * 60  # the op's build takes minutes: a build lock older than this was left by a killed build


def _clear_stale_build_locks() -> None:
    """torch waits forever for the lock file of a JIT build that was killed (a test run stopped mid-build leaves
    it), so every later run would hang until its timeout: remove one that no build can still hold."""
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
    for lock in [*root.glob("*/deepspeed*/lock"), *root.glob("deepspeed*/lock")]:
        try:
            if time.time() - lock.stat().st_mtime > STALE_LOCK_S:
                lock.unlink()
        except OSError:
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
