"""One control-channel connection (pods/link.py) over a real socket pair: heartbeats keep it alive, silence and
oversized lines end it, with how."""

from __future__ import annotations

import socket
import time

import pytest

from dslaunch.pods import link as link_mod
from dslaunch.pods.link import Link, control


def test_lines_come_through_without_the_heartbeats_and_a_close_is_a_drop() -> None:
    a, b = socket.socketpair()
    here, there = Link(a, "there"), Link(b, "here")
    there.start_heartbeats()
    there.send({"t": "stop"})
    time.sleep(link_mod.HEARTBEAT * 1.5)  # a heartbeat or so in between
    there.send_raw(b"@dslaunch-event {}\n")
    lines = here.lines()
    assert control(next(lines)) == {"t": "stop"}
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
