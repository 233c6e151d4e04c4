"""This machine's visible GPU ids without importing torch (pure, stdlib only): the CLI's slots and preflight."""

from __future__ import annotations

import os
from collections.abc import Mapping


def gpu_labels(env: Mapping[str, str]) -> tuple[str, ...]:
    """Visible GPU ids without importing torch: CUDA_VISIBLE_DEVICES, else the driver's list."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(label.strip() for label in visible.split(",") if label.strip())
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        count = 0
    return tuple(str(i) for i in range(count))
