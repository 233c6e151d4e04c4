"""DeepSpeed 0.19.8's deepspeed.initialize (ZeRO 0 and 2, mpu=dslaunch.compat.mpu) runs under dslaunch as under
torchrun: the same weights after the same steps (2 gloo ranks on the CPU accelerator)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH, SCRIPTS

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api, pytest.mark.frameworks]
SCRIPT = str(SCRIPTS / "ds_train.py")
# No op is JIT-built: the rank script marks none compatible, so DeepSpeed's comm stays on gloo (see ds_train.py).
ENV = {"DS_ACCELERATOR": "cpu", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}


def _weights(launcher: list[str], stage: int) -> str:
    done = subprocess.run(
        [*launcher, SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ENV, "ZERO": str(stage)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = re.findall(rf"rank=(\d) stage={stage} dp=2 wsum=(-?[0-9]+\.[0-9]{{4}})", done.stdout)
    assert sorted(rank for rank, _ in found) == ["0", "1"], done.stdout[-3000:]
    assert len({w for _, w in found}) == 1, found  # both ranks hold the same model
    return found[0][1]


@pytest.mark.timeout(400)  # three DeepSpeed jobs of 2 ranks: about 35 s on a quiet machine
def test_zero_0_and_2_train_as_under_torchrun() -> None:
    pytest.importorskip("deepspeed")
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--nproc-per-node", "2"]
    dslaunch = [*DSLAUNCH, "--nproc-per-node", "2", "--master-port", "0"]
    expected = _weights(torchrun, 2)
    assert _weights(dslaunch, 2) == expected
    assert _weights(dslaunch, 0) == expected  # plain data parallel reaches the same weights
