"""Admission to the coordinator (channel/door.py) under a sustained flood, and joining bounded by join_timeout in
every path (pods/member.py): on a real loopback port."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from dslaunch.channel import door as admission
from dslaunch.channel import handshake
from dslaunch.pods.assign import Shape
from dslaunch.pods.coordinator import Coordinator
from dslaunch.pods.member import Joined, join
from tests.channel.clients import SimPod
from tests.pods.pods import Flood, free_port_pair

KEY, RUN = b"job-secret", "run-5"


@pytest.fixture
def door(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Coordinator, int]]:
    monkeypatch.setattr(admission, "MAX_PENDING", 32)  # fewer slots than flooding clients
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 2, fixed=True))
    coordinator.listen(port)
    yield coordinator, port
    coordinator.close(0)


def test_a_real_pod_joins_within_its_join_timeout_during_a_sustained_reconnect_flood(
    door: tuple[Coordinator, int],
) -> None:
    coordinator, port = door
    flood = Flood(port, 200, seconds=8)
    try:
        time.sleep(1.0)  # the flood is on: every slot taken, and each drop reconnected at once
        began = time.monotonic()
        joining = threading.Thread(
            target=lambda: got.append(
                join(("127.0.0.1", port), KEY, RUN, (1, "pod-1", -1), deadline=time.monotonic() + 3, stopped=[])
            ),
            daemon=True,
        )
        got: list[object] = []
        joining.start()
        ready = coordinator.gather(began + 3, [])
        took = time.monotonic() - began
        assert ready, f"the pod did not get in within its join timeout past {flood.connections} flood connections"
        assert took < 3
        coordinator.start(0, "pod-0", lambda hosts: None)
        joining.join(5)
        assert got and isinstance(got[0], Joined), got
        assert flood.connections > 200  # the flood was dropped and came back
    finally:
        flood.stop()


def test_a_port_that_accepts_and_never_speaks_is_given_up_at_the_join_timeout() -> None:
    """A frozen coordinator or a squatter: the TCP connection is made (the backlog), nothing is ever sent."""
    squatter = socket.create_server(("127.0.0.1", 0), backlog=16)
    port = squatter.getsockname()[1]
    began = time.monotonic()
    got = join(("127.0.0.1", port), KEY, RUN, (1, "pod-1", -1), deadline=began + 2, stopped=[])
    took = time.monotonic() - began
    squatter.close()
    assert isinstance(got, str) and "did not" in got, got
    assert took < 2.5, f"join_timeout=2 gave up after {took:.1f} s"


def _first_line(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(data)
        got = b""
        while b"\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return got


def test_a_wrong_hello_is_told_why_and_a_replayed_one_gets_nothing(door: tuple[Coordinator, int]) -> None:
    coordinator, port = door
    wrong = _first_line(port, handshake.hello(b"guess", RUN, "c" * 32))
    assert b"does not hold the job's secret" in wrong
    hello = handshake.hello(KEY, RUN, "d" * 32)
    assert handshake.read_challenge(_first_line(port, hello).rstrip(b"\n")) is not None
    assert _first_line(port, hello) == b""  # the same nonce again: a replay, dropped unanswered
    assert coordinator.turned_away >= 2


def test_a_slow_handshake_is_ended_at_its_deadline_and_others_get_in_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admission, "HANDSHAKE_TIME", 1.0)
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(3, 3, fixed=True))
    coordinator.listen(port)
    try:
        began = time.monotonic()
        slow = [SimPod(KEY, RUN, 1) for _ in range(20)]
        for pod in slow:  # a valid hello, and never an answer
            pod.connect(port)
            pod.hello()
        halves = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        for s in halves:  # half a hello, then nothing
            s.sendall(handshake.hello(KEY, RUN, handshake.nonce())[:40])
        real = [SimPod(KEY, RUN, r) for r in (1, 2)]
        assert all(pod.join(port, time.monotonic() + 1.0) for pod in real)
        assert time.monotonic() - began < 1.0 and coordinator.gather(time.monotonic() + 1, [])
        for s in halves:
            s.settimeout(3)
            assert s.recv(100) == b""  # ended by the door
        took = time.monotonic() - began
        assert 1.0 <= took < 1.0 + 2 * admission.SWEEP + 0.5, took
        for pod in slow:
            assert pod.line(time.monotonic() + 2) is not None  # its challenge, then the end
            assert pod.line(time.monotonic() + 2) is None
        assert coordinator.turned_away == 40
    finally:
        coordinator.close(0)


def test_thousands_of_idle_connections_without_the_secret_and_a_pod_gets_in_on_its_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admission, "MAX_PENDING", 1000)  # fewer than the flood: the oldest are pushed out
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 2, fixed=True))
    coordinator.listen(port)
    flood: list[socket.socket] = []
    try:
        for _ in range(3000):
            flood.append(socket.create_connection(("127.0.0.1", port)))
        pod = SimPod(KEY, RUN, 1)
        began = time.monotonic()
        assert pod.join(port, began + 2), "the pod's one connection did not get through the flood"
        assert time.monotonic() - began < 1.0
        assert coordinator.gather(time.monotonic() + 2, [])
        deadline = time.monotonic() + 5
        while coordinator.turned_away < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert coordinator.turned_away >= 2000  # pushed out: pending stays bounded
    finally:
        for s in flood:
            s.close()
        coordinator.close(0)


def test_an_answer_waiting_unread_at_the_deadline_is_taken_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline is the peer's, not the loop's: an answer that came in time but sits unread (the loop serving
    thousands of sockets a batch at a time) is read when the sweep finds the handshake past its time."""
    monkeypatch.setattr(admission, "HANDSHAKE_TIME", 0.5)
    monkeypatch.setattr(admission, "SWEEP", 3600.0)  # the sweep runs when the test says
    admitted: list[int] = []
    door = admission.Door(KEY, RUN, lambda sock, joiner, _nonce, _rest: admitted.append(joiner.node_rank))
    server = socket.create_server(("127.0.0.1", 0))
    door.open(server)
    try:
        pod = SimPod(KEY, RUN, 1)
        pod.connect(server.getsockname()[1])
        pod.hello()
        got = pod.line(time.monotonic() + 3)
        assert got is not None and handshake.read_challenge(got) is not None
        pod.buf = got + b"\n" + pod.buf  # answer() takes the challenge again
        on_loop = threading.Event()
        door._loop.call_soon(lambda: ([door._loop.forget(c.sock) for c in door._proven.values()], on_loop.set()))
        assert on_loop.wait(3)
        assert pod.answer(time.monotonic() + 3)
        time.sleep(0.7)  # past the deadline, the answer unread
        swept = threading.Event()
        door._loop.call_soon(lambda: (door._expire(), swept.set()))
        assert swept.wait(3)
        assert admitted == [1] and door.turned_away == 0
    finally:
        door.close()
