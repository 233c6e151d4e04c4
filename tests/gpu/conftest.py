"""The GPU tier (docs/gpu.md): every test in this folder is skipped, with the reason, where no CUDA device can be
used, and runs where one can (``scripts/gpu-smoke.sh`` on a GPU machine).

The check never initialises CUDA in the pytest process (the tests start their ranks as new processes, and nothing
here needs torch): where no NVIDIA driver is present at all it answers at once; else one subprocess asks torch,
once per session, and its answer (versions, device names and UUIDs) is the ``cuda`` fixture. No GPU is never a
failure, under CI (``CI=true``) too: CI machines have none.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.launch import Cuda, without_device_mask

HERE = Path(__file__).parent
_DRIVER_SIGNS = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia")
_PROBE = """
import json
try:
    import torch
except Exception as exc:
    print(json.dumps({"error": f"torch cannot be imported: {type(exc).__name__}: {exc}"}))
    raise SystemExit(0)
facts = {"torch": torch.__version__, "cuda": torch.version.cuda, "names": [], "uuids": []}
if not torch.cuda.is_available():
    try:
        torch.cuda.init()
        why = "torch.cuda.is_available() is False"
    except Exception as exc:
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    facts["error"] = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees none: {why}"
else:
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    facts["names"] = [p.name for p in props]
    facts["uuids"] = [str(p.uuid) for p in props]
print(json.dumps(facts))
"""


@functools.cache
def probe() -> tuple[Cuda | None, str | None]:
    """(what torch sees, None) where a CUDA device can be used, else (None, the reason to skip)."""
    if not any(os.path.exists(p) for p in _DRIVER_SIGNS) and shutil.which("nvidia-smi") is None:
        return None, "no CUDA device: no NVIDIA driver here (no /dev/nvidiactl, /proc/driver/nvidia or nvidia-smi)"
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, env=without_device_mask()
        )
        facts = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return None, f"no CUDA device: the torch probe failed ({type(exc).__name__}: {exc})"
    if facts.get("error") or not facts["names"]:
        return None, f"no CUDA device: {facts.get('error') or 'torch lists no device'}"
    return Cuda(facts["torch"], facts["cuda"], tuple(facts["names"]), tuple(facts["uuids"])), None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if HERE in item.path.parents]
    if not mine:
        return
    _, reason = probe()
    if reason is not None:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cuda() -> Cuda:
    found, reason = probe()
    if found is None:  # collection skipped every test then; a fixture asked for directly says why too
        pytest.skip(str(reason))
    return found


@pytest.fixture
def two_gpus(cuda: Cuda) -> Cuda:
    if cuda.count < 2:
        pytest.skip(f"needs 2 GPUs, found {cuda.count}")
    return cuda
