"""Core lists and each rank's slice of them (dslaunch/oslib/binding.py, pure); the real binding through numactl is
tested end to end in tests/cli/test_parity_options.py."""

from __future__ import annotations

import pytest

from dslaunch.oslib import binding


@pytest.mark.parametrize(
    ("text", "cores"),
    [("0", (0,)), ("1,3-5,7", (1, 3, 4, 5, 7)), ("8-9,0-1", (8, 9, 0, 1)), (" 2 , 4-4 ", (2, 4))],
)
def test_parse_core_list(text: str, cores: tuple[int, ...]) -> None:
    assert binding.parse_core_list(text) == cores


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "bad item"),
        ("a", "bad item"),
        ("5-3", "backwards"),
        ("1,1", "more than once"),
        ("0-2,2", "more than once"),
        ("-1", "bad item"),
        ("1-", "bad item"),
    ],
)
def test_bad_core_list(text: str, needle: str) -> None:
    with pytest.raises(binding.CoreListError, match=needle):
        binding.parse_core_list(text)


def test_compress_and_slices() -> None:
    assert binding.compress((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"
    cores = tuple(range(8))
    assert [binding.rank_cores(cores, 3, r) for r in range(3)] == [(0, 1), (2, 3), (4, 5)]
    assert [binding.rank_cores((4, 5), 3, r) for r in range(3)] == [(4,), (5,), (4,)]  # shared, never empty
    assert binding.cores_for(None, 2, 0) is None


def test_usable_cores_are_this_process_affinity() -> None:
    import os

    assert binding.usable_cores() == tuple(sorted(os.sched_getaffinity(0)))


def test_numactl_argv_binds_cpus_and_memory_of_the_slice() -> None:
    argv = binding.numactl_argv((2, 3, 5))
    assert argv[0] == "numactl" and any("2-3,5" in part for part in argv)
