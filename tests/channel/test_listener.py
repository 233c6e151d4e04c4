"""A control channel server's listening socket and its room for open files (channel/listener.py)."""

from __future__ import annotations

import resource
import socket
from collections.abc import Iterator

import pytest

from dslaunch.channel import listener


def test_the_server_listens_on_loopback_and_a_taken_port_raises() -> None:
    with listener.open_server(0) as server:
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = server.accept()
            conn.close()
        with pytest.raises(OSError):
            listener.open_server(port)


def test_the_backlog_is_the_kernels_or_at_least_128() -> None:
    assert 128 <= listener.listen_backlog() <= 65535


@pytest.fixture
def files_limit() -> Iterator[tuple[int, int]]:
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def test_open_files_are_raised_to_what_is_needed_then_to_the_hard_limit(files_limit: tuple[int, int]) -> None:
    soft, hard = files_limit
    if hard == resource.RLIM_INFINITY or hard < 2048 or soft < 1024:
        pytest.skip(f"needs a hard limit on open files of at least 2048 and a soft one of 1024 (are {soft}, {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    listener.more_open_files(512)  # enough already: left as it is
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1024, hard)
    listener.more_open_files(1500)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1500, hard)
    listener.more_open_files(hard + 1)  # never past the hard limit
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
    listener.more_open_files()
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
