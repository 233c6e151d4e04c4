"""One control-channel connection (pods/link.py) over a real socket pair: heartbeats keep it alive, silence and
oversized lines end it, with how; the size bound is exact."""

from __future__ import annotations

import socket
import time

import pytest

from dslaunch.pods import link as link_mod
from dslaunch.pods.link import Link


def test_lines_come_through_without_the_heartbeats_and_a_close_is_a_drop() -> None:
    a, b = socket.socketpair()
    here, there = Link(a, "there"), Link(b, "here")
    there.start_heartbeats()
    there.send({"t": "stop"})
    time.sleep(link_mod.HEARTBEAT * 1.5)  # a heartbeat or so in between
    there.send_raw(b"@dslaunch-event {}\n")
    lines = here.lines()
    assert next(lines) == '{"t":"stop"}\n'
    assert next(lines) == "@dslaunch-event {}\n"
    there.close()
    assert list(lines) == [] and here.why == "dropped"
    assert not here.send({"t": "x"})


def test_a_silent_peer_is_lost_within_the_silence_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """(The 4 s of the real bound are measured across a network partition: tests/runners/test_pods_partition.py.)"""
    monkeypatch.setattr(link_mod, "SILENT", 1.0)
    a, _b = socket.socketpair()  # _b is held open and never written: no FIN, no reset, like a partition
    here = Link(a, "there")
    began = time.monotonic()
    assert list(here.lines()) == []
    took = time.monotonic() - began
    assert here.why == "silent" and link_mod.SILENT <= took < link_mod.SILENT + 1


def test_a_line_over_the_limit_ends_the_connection_with_bounded_memory() -> None:
    a, b = socket.socketpair()
    here = Link(a, "there")
    b.sendall(b"x" * (link_mod.MAX_LINE * 3))
    assert list(here.lines()) == []
    assert here.why == "oversized"
    assert len(here._buf) <= 2 * link_mod.MAX_LINE


@pytest.mark.parametrize("newline_with_it", [True, False])
def test_the_size_bound_is_exact_a_line_one_byte_over_is_refused(newline_with_it: bool) -> None:
    """Exactly MAX_LINE bytes (the newline not counted) come through; MAX_LINE + 1 end the link, whether the
    newline comes in the same read or never."""
    a, b = socket.socketpair()
    here = Link(a, "there")
    b.sendall(b"x" * link_mod.MAX_LINE + b"\n")
    lines = here.lines()
    assert next(lines) == "x" * link_mod.MAX_LINE + "\n"
    b.sendall(b"y" * (link_mod.MAX_LINE + 1) + (b"\n" if newline_with_it else b""))
    assert list(lines) == [] and here.why == "oversized"


def test_a_line_a_few_bytes_over_is_refused_though_a_good_line_shares_its_read() -> None:
    a, b = socket.socketpair()
    here = Link(a, "there")
    b.sendall(b'{"t":"stop"}\n' + b"z" * (link_mod.MAX_LINE + 5) + b"\n" + b'{"t":"stop"}\n')
    assert list(here.lines()) == ['{"t":"stop"}\n'] and here.why == "oversized"
