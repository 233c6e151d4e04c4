"""Links served on the event loop (channel/loop_link.py) over real socket pairs: a peer that stops reading is ended
and the others are not held up, lines that come in pieces, heartbeats only when idle, any line as one, and
silence."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from dslaunch.channel import handshake
from dslaunch.channel import link as link_mod
from dslaunch.channel import loop_link as loop_link_mod
from dslaunch.channel.event_loop import Loop
from dslaunch.channel.link import Sealer
from dslaunch.channel.loop_link import MAX_OUT, LinkClock, LoopLink
from tests.helpers import until

KEYS = handshake.session_keys(b"job-secret", "run-3", "a" * 32, "b" * 32)  # (to the pod, to the coordinator)


class Served:
    """Links on one loop, as the coordinator's: each with what it heard and how it ended."""

    def __init__(self) -> None:
        self.loop = Loop("test links")
        self.clock = LinkClock(self.loop)
        self.heard: dict[int, list[bytes]] = {}
        self.ended: dict[int, str] = {}
        self.loop.start()

    def run(self, fn: Callable[[], object]) -> object:
        done = threading.Event()
        got: list[object] = []
        self.loop.call_soon(lambda: (got.append(fn()), done.set()))
        assert done.wait(5), "the loop is blocked"
        return got[0]

    def link(
        self,
        n: int,
        *,
        sealed: bool = True,
        tcp: bool = False,
        long_lines: bool = False,
        clock: LinkClock | None = None,
    ) -> tuple[LoopLink, socket.socket]:
        """Link ``n``'s coordinator end, served, and the raw socket of its pod end (``tcp``: over loopback TCP, as
        the pods' links; else a socket pair)."""
        here, there = _tcp_pair() if tcp else socket.socketpair()
        keys = (KEYS[0], KEYS[1]) if sealed else None
        link = LoopLink(clock or self.clock, here, f"pod-{n}", keys, long_lines=long_lines)
        self.heard[n] = []
        link.on_line = lambda _link, payload: self.heard[n].append(payload)
        link.on_end = lambda done: self.ended.__setitem__(n, done.why)
        self.run(link.start)
        return link, there

    def wait_for(self, what: Callable[[], bool], timeout: float = 5.0) -> bool:
        return until(what, timeout)


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        there = socket.create_connection(server.getsockname())
        here, _addr = server.accept()
    return here, there


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.loop.stop()


def _pods_lines(*payloads: bytes) -> bytes:
    """Lines as a pod's end seals them (its key, its count from 0)."""
    sealer = Sealer(KEYS[1])
    return b"".join(sealer.seal(p) for p in payloads)


def _read_lines(sock: socket.socket, seconds: float) -> list[bytes]:
    sock.settimeout(0.05)
    got = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not chunk:
            break
        got += chunk
    return got.splitlines()


def test_a_peer_that_stops_reading_is_ended_and_the_others_get_everything(served: Served) -> None:
    stuck, stuck_end = served.link(1)
    readers = [served.link(n) for n in (2, 3)]
    received = [0, 0]

    def read(i: int, sock: socket.socket) -> None:
        while chunk := sock.recv(1 << 16):
            received[i] += chunk.count(b"\n")

    threads = [threading.Thread(target=read, args=(i, s), daemon=True) for i, (_l, s) in enumerate(readers)]
    for t in threads:
        t.start()
    line = b"x" * 60_000 + b"\n"
    sends = 2 * MAX_OUT // len(line) + 200  # past its socket's buffer and the link's bound
    for _ in range(sends):
        began = time.monotonic()
        served.run(lambda: [link.send_raw(line) for link in (stuck, *(r[0] for r in readers))])
        assert time.monotonic() - began < 5.0, "a send held the loop up"  # a blocked one would never end
    assert served.wait_for(lambda: served.ended.get(1) == "stalled", 30), served.ended
    assert served.wait_for(lambda: received == [sends, sends], 30), received
    assert 2 not in served.ended and 3 not in served.ended
    for _link, sock in readers:
        sock.shutdown(socket.SHUT_RDWR)  # the readers' recv returns, rather than failing on a socket closed under it
    for t in threads:
        t.join(5)
    for _link, sock in readers:
        sock.close()
    stuck_end.close()


def test_a_line_that_comes_in_pieces_is_one_line(served: Served) -> None:
    _link, pod = served.link(1)
    whole = _pods_lines(b'{"t":"one"}', b'{"t":"two"}')
    first = whole.index(b"\n") + 1
    for i in range(first):  # the first line a byte at a time
        pod.sendall(whole[i : i + 1])
        time.sleep(0.002)
    cut = whole.rindex(b"\t") + 10  # the second cut in the middle of its MAC
    pod.sendall(whole[first:cut])
    time.sleep(0.2)
    assert served.heard[1] == [b'{"t":"one"}']
    pod.sendall(whole[cut:])
    assert served.wait_for(lambda: served.heard[1] == [b'{"t":"one"}', b'{"t":"two"}']), served.heard[1]
    assert 1 not in served.ended


def test_a_line_cut_at_its_mac_by_the_end_of_the_connection_is_not_taken(served: Served) -> None:
    _link, pod = served.link(1)
    whole = _pods_lines(b'{"t":"one"}', b'{"t":"stop"}')
    pod.sendall(whole[: whole.rindex(b"\t") + 5])
    pod.close()
    assert served.wait_for(lambda: 1 in served.ended)
    assert served.ended[1] == "dropped" and served.heard[1] == [b'{"t":"one"}']


def test_a_tampered_line_ends_the_link_after_the_good_ones(served: Served) -> None:
    _link, pod = served.link(1)
    good = _pods_lines(b'{"t":"a"}', b'{"t":"b"}')
    pod.sendall(good.replace(b'"b"', b'"x"'))
    assert served.wait_for(lambda: 1 in served.ended)
    assert served.ended[1] == "forged" and served.heard[1] == [b'{"t":"a"}']


def test_a_line_over_the_bound_ends_the_link_before_its_newline_comes(served: Served) -> None:
    _link, pod = served.link(1, sealed=False)
    pod.sendall(b"y" * link_mod.MAX_LINE + b"\n")  # exactly the bound: taken
    pod.sendall(b"z" * (link_mod.MAX_LINE + 1))  # one over, no newline yet
    assert served.wait_for(lambda: 1 in served.ended)
    assert served.ended[1] == "oversized" and served.heard[1] == [b"y" * link_mod.MAX_LINE]


def test_heartbeats_go_only_when_nothing_else_was_sent(served: Served) -> None:
    busy, busy_end = served.link(1, sealed=False)
    _idle, idle_end = served.link(2, sealed=False)
    stop = threading.Event()

    def talk() -> None:
        while not stop.wait(link_mod.HEARTBEAT / 4):
            served.loop.call_soon(busy.send_raw, b'{"t":"news"}\n')

    threading.Thread(target=talk, daemon=True).start()
    heard_busy = _read_lines(busy_end, link_mod.HEARTBEAT * 3)
    stop.set()
    heard_idle = _read_lines(idle_end, 0.1)
    assert heard_busy and set(heard_busy) == {b'{"t":"news"}'}, set(heard_busy)
    beats = [line for line in heard_idle if line == b'{"t":"hb"}']
    assert 2 <= len(beats) <= 4 and len(beats) == len(heard_idle), heard_idle


def test_any_line_counts_as_a_heartbeat_and_silence_ends_the_link(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop_link_mod, "SILENT", 1.0)  # the clock reads its own binding
    _talking, talking_end = served.link(1, sealed=False)
    _silent, _silent_end = served.link(2, sealed=False)
    began = time.monotonic()
    while time.monotonic() - began < 2.5:  # never a heartbeat, a line every half SILENT
        talking_end.sendall(b'{"t":"news"}\n')
        time.sleep(0.5)
    assert served.ended.get(2) == "silent" and 1 not in served.ended, served.ended
    assert len(served.heard[1]) == 5


def test_a_silent_link_is_ended_within_silent_and_half_a_heartbeat(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop_link_mod, "SILENT", 1.0)  # the clock reads its own binding
    began = time.monotonic()
    _silent, _silent_end = served.link(1)  # held open, never written: no FIN, no reset, as a partition
    assert served.wait_for(lambda: 1 in served.ended, 5)
    took = time.monotonic() - began
    assert served.ended[1] == "silent" and 1.0 <= took <= 1.0 + link_mod.HEARTBEAT / 2 + 0.2, took


def test_finish_sends_everything_then_shuts_our_side(served: Served) -> None:
    link, pod = served.link(1, sealed=False)
    served.run(lambda: (link.send_raw(b'{"t":"end"}\n'), link.finish()))
    assert _read_lines(pod, 0.3)[-1] == b'{"t":"end"}'  # then the end of the stream: our side is shut
    pod.close()
    assert served.wait_for(lambda: 1 in served.ended) and served.ended[1] == "closed"


def test_a_line_waiting_unread_is_no_silence_when_the_loop_is_behind(served: Served) -> None:
    """The clock finds a link quiet for SILENT while its line sits unread (the loop serves thousands of sockets a
    batch at a time): it reads it first, and the link lives."""
    link, pod = served.link(1)
    served.run(lambda: served.loop.forget(link.sock))  # the loop does not get to this socket
    pod.sendall(_pods_lines(b'{"t":"late"}'))
    time.sleep(0.2)

    def clock_looks() -> None:
        link.last_heard -= link_mod.SILENT + 1
        for _ in range(5):  # every slot of the wheel
            served.clock._visit()

    served.run(clock_looks)
    assert 1 not in served.ended and served.heard[1] == [b'{"t":"late"}']


def test_a_lone_heartbeat_waits_for_the_next_line_on_a_link_of_long_lines(served: Served) -> None:
    """Linux: a link whose peer sends nothing shorter than a heartbeat is woken for two heartbeats, or one event, never
    for one heartbeat (half the reads of a quiet coordinator); a link of any lines reads each at once."""
    paired, paired_end = served.link(1, tcp=True, long_lines=True)
    each, each_end = served.link(2, tcp=True)
    began = paired.last_heard
    pod_seal = Sealer(KEYS[1])
    for end in (paired_end, each_end):
        end.sendall(Sealer(KEYS[1]).seal(b'{"t":"hb"}'))
    assert served.wait_for(lambda: each.last_heard > began, 2)
    time.sleep(0.3)
    assert paired.last_heard == began  # the lone heartbeat waits in the socket
    pod_seal.seal(b'{"t":"hb"}')  # the pod's count past the heartbeat it sent
    paired_end.sendall(pod_seal.seal(b'{"t":"exit","rank":3}'))
    assert served.wait_for(lambda: served.heard[1] == [b'{"t":"exit","rank":3}'], 2), served.heard[1]
    assert paired.last_heard > began and not served.ended


def test_a_silent_link_of_long_lines_is_dated_by_when_its_last_heartbeat_came(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its last heartbeat waits unread (one, under the low-water mark): the clock reads it when the link seems silent
    and takes the kernel's arrival time, not the read's, so the silence is noticed SILENT after the beat came."""
    monkeypatch.setattr(loop_link_mod, "SILENT", 1.0)  # the clock reads its own binding
    _link, pod = served.link(1, tcp=True, long_lines=True)
    time.sleep(0.5)
    pod.sendall(Sealer(KEYS[1]).seal(b'{"t":"hb"}'))
    sent = time.monotonic()
    assert served.wait_for(lambda: 1 in served.ended, 5)
    took = time.monotonic() - sent
    assert served.ended[1] == "silent" and 1.0 <= took <= 1.0 + link_mod.HEARTBEAT / 2 + 0.3, took


def test_a_clock_of_a_slower_beat_sends_fewer_heartbeats(served: Served) -> None:
    """A server with more than ``BEAT_SHARE`` peers beats less often (``link.server_beat``); its silence bound for
    them is unchanged."""
    slow = LinkClock(served.loop, beat=link_mod.server_beat(2 * link_mod.BEAT_SHARE))  # every 2 s
    _fast, fast_end = served.link(1, sealed=False)
    _slow, slow_end = served.link(2, sealed=False, clock=slow)
    heard: dict[str, list[bytes]] = {}
    readers = [
        threading.Thread(target=lambda k=k, s=s: heard.__setitem__(k, _read_lines(s, 4.4)))
        for k, s in (("fast", fast_end), ("slow", slow_end))
    ]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    served.run(slow.stop)
    assert 3 <= len(heard["fast"]) <= 5 and 1 <= len(heard["slow"]) <= 2, heard


@pytest.mark.parametrize(
    ("peers", "beat", "silent"), [(1, 1.0, 4.0), (4096, 1.0, 4.0), (6144, 1.5, 6.0), (16384, 4.0, 16.0)]
)
def test_a_server_beats_slower_past_its_share_of_peers_and_they_wait_as_many_beats(
    peers: int, beat: float, silent: float
) -> None:
    assert (link_mod.server_beat(peers), link_mod.server_silent(peers)) == (beat, silent)
