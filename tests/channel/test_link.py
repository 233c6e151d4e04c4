"""One control-channel connection (channel/link.py) over a real socket pair: heartbeats keep it alive, silence and
oversized lines end it, with how; the size bound is exact."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from dslaunch.channel import handshake
from dslaunch.channel import link as link_mod
from dslaunch.channel.link import Link, Sealer


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
    """(The 4 s of the real bound are measured across a network partition: tests/pods/test_pods_partition.py.)"""
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


def test_a_link_may_take_longer_lines_where_its_reader_says_so() -> None:
    """A job agent's link (agent/dialback_client.py) takes its launcher's ``run`` lines, the whole plan in each."""
    a, b = socket.socketpair()
    here = Link(a, "there", max_line=4 * link_mod.MAX_LINE)

    def send() -> None:
        with contextlib.suppress(OSError):  # the link ends before the last line is all sent
            b.sendall(b"x" * 4 * link_mod.MAX_LINE + b"\n" + b"y" * (4 * link_mod.MAX_LINE + 1))

    sending = threading.Thread(target=send)
    sending.start()  # more than the socket pair holds: sent while it is read
    lines = here.lines()
    assert next(lines) == "x" * 4 * link_mod.MAX_LINE + "\n"
    assert list(lines) == [] and here.why == "oversized"
    sending.join(5)
    b.close()


def test_a_line_a_few_bytes_over_is_refused_though_a_good_line_shares_its_read() -> None:
    a, b = socket.socketpair()
    here = Link(a, "there")
    b.sendall(b'{"t":"stop"}\n' + b"z" * (link_mod.MAX_LINE + 5) + b"\n" + b'{"t":"stop"}\n')
    assert list(here.lines()) == ['{"t":"stop"}\n'] and here.why == "oversized"


KEYS = handshake.session_keys(b"job-secret", "run-3", "a" * 32, "b" * 32)  # (to the pod, to the coordinator)


def _sealed_pair() -> tuple[Link, Link, socket.socket, socket.socket]:
    """The coordinator's and the pod's ends of one link, and the raw sockets under them."""
    a, b = socket.socketpair()
    return Link(a, "pod", keys=(KEYS[0], KEYS[1])), Link(b, "coordinator", keys=(KEYS[1], KEYS[0])), a, b


def test_sealed_lines_and_heartbeats_come_through_in_order() -> None:
    coordinator, pod, _a, _b = _sealed_pair()
    pod.start_heartbeats()
    pod.send({"t": "one"})
    time.sleep(link_mod.HEARTBEAT * 1.5)
    pod.send_raw(b'{"t":"two"}\n{"t":"three"}\n')
    lines = coordinator.lines()
    assert [next(lines) for _ in range(3)] == ['{"t":"one"}\n', '{"t":"two"}\n', '{"t":"three"}\n']
    coordinator.send({"t": "back"})
    assert next(pod.lines()) == '{"t":"back"}\n'  # the other direction, its own key and count


def _tampered(kind: str) -> bytes:
    """Three lines as the pod's end would seal them (its key, its count), one of them tampered with on the way."""
    pods_key, coordinators_key = Sealer(KEYS[1]), Sealer(KEYS[0])
    first, second, third = (pods_key.seal(line) for line in (b'{"t":"a"}', b'{"t":"b"}', b'{"t":"c"}'))
    coordinators_key.seal(b'{"t":"a"}')
    reflected = coordinators_key.seal(b'{"t":"b"}')  # right count, the other direction's key
    return {
        "altered": first + second.replace(b'"b"', b'"x"') + third,
        "replayed": first + first + second,
        "reordered": second + first + third,
        "injected": first + b'{"t":"stop"}\n' + second,
        "injected with a made-up MAC": first + b'{"t":"stop"}\t' + b"0" * 32 + b"\n" + second,
        "reflected back to its sender": first + reflected,
        "dropped": first + third,
    }[kind]


@pytest.mark.parametrize(
    "kind",
    [
        "altered",
        "replayed",
        "reordered",
        "injected",
        "injected with a made-up MAC",
        "reflected back to its sender",
        "dropped",
    ],
)
def test_a_tampered_line_ends_the_link_after_the_good_ones_before_it(kind: str) -> None:
    coordinator, _pod, _a, b = _sealed_pair()
    b.sendall(_tampered(kind))
    got = list(coordinator.lines())
    assert got == ([] if kind == "reordered" else ['{"t":"a"}\n']) and coordinator.why == "forged", got
