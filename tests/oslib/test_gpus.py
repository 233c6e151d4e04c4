"""Visible GPU ids without torch (dslaunch/oslib/gpus.py): CUDA_VISIBLE_DEVICES wins, else the driver's list."""

from __future__ import annotations

import os

import pytest

from dslaunch.oslib.gpus import gpu_labels


@pytest.mark.parametrize(
    ("visible", "labels"),
    [
        ("0,1,2", ("0", "1", "2")),
        (" 3 , 5 ", ("3", "5")),
        ("", ()),
        ("GPU-1a2b,MIG-7", ("GPU-1a2b", "MIG-7")),
        ("1,,2", ("1", "2")),
    ],
)
def test_cuda_visible_devices_is_the_list(visible: str, labels: tuple[str, ...]) -> None:
    assert gpu_labels({"CUDA_VISIBLE_DEVICES": visible}) == labels


def test_without_the_variable_the_driver_is_asked() -> None:
    try:
        count = len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        count = 0
    assert gpu_labels({}) == tuple(str(i) for i in range(count))
