"""The remote runners' room for what they hold per host: RLIMIT_NOFILE's and RLIMIT_NPROC's soft limits, raised
only as needed."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from dslaunch.runners.remote import rlimits

INF = resource.RLIM_INFINITY


@pytest.mark.parametrize(
    ("need", "soft", "hard", "expected"),
    [
        (1280, 1024, 524288, 1280),  # the usual: soft 1,024, a generous hard limit
        (1280, 1024, 4096, 1280),
        (5000, 1024, 4096, 4096),  # as far as the hard limit goes
        (1280, 1024, INF, 1280),
        (1280, 2048, 4096, None),  # enough already: never lowered
        (1280, INF, INF, None),
        (5000, 4096, 4096, None),  # no room to raise
        (5000, 4096, 1024, None),  # (a hard limit below the soft one cannot happen; still never lowered)
    ],
)
def test_new_soft_limit(need: int, soft: int, hard: int, expected: int | None) -> None:
    assert rlimits.new_soft_limit(need, soft, hard) == expected


@pytest.mark.parametrize(
    ("hosts", "soft", "warns"),
    [(64, 1024, False), (384, 1024, False), (400, 1024, True), (1024, 2304, False), (1024, 2048, True)],
)
def test_shortfall_warns_only_below_two_per_host(hosts: int, soft: int, warns: bool) -> None:
    warning = rlimits.shortfall(hosts, soft)
    assert (warning is not None) == warns
    if warning:
        assert f"{hosts} hosts" in warning and "ulimit -Hn" in warning and "open files" in warning


@pytest.fixture
def low_soft_limit() -> Iterator[tuple[int, int]]:
    """This process's soft limit at 512 for the test, restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != INF and hard < rlimits.needed(1024):
        pytest.skip(f"the hard limit ({hard}) leaves no room to raise")
    resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
    try:
        yield 512, hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_make_room_raises_the_soft_limit_for_1024_hosts(low_soft_limit: tuple[int, int]) -> None:
    _, hard = low_soft_limit
    assert rlimits.make_room(64) == []  # 64 hosts fit in 512
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (512, hard)
    assert rlimits.make_room(1024) == []
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (rlimits.needed(1024), hard)


@pytest.mark.parametrize(
    ("runner", "hosts", "soft", "warns"),
    [("ssh", 700, 4096, False), ("ssh", 1024, 4096, True), ("pdsh", 1024, 4096, False), ("pdsh", 2048, 4096, True)],
)
def test_a_tasks_shortfall_names_the_threads_per_host(runner: str, hosts: int, soft: int, warns: bool) -> None:
    warning = rlimits.shortfall(hosts, soft, rlimits.TASKS[runner])
    assert (warning is not None) == warns
    if warning:
        assert "threads and processes" in warning and "ulimit -Hu" in warning


def test_make_room_raises_the_task_limit_for_1024_hosts() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    need = rlimits.needed(1024, rlimits.TASKS["ssh"])
    if hard != INF and hard < need:
        pytest.skip(f"the hard limit ({hard}) leaves no room to raise")
    resource.setrlimit(resource.RLIMIT_NPROC, (4096, hard))
    try:
        assert rlimits.make_room(1024, "ssh") == []
        assert resource.getrlimit(resource.RLIMIT_NPROC) == (need, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
