"""The coordinator's door (pods/coordinator.py, pods/member.py) on a real loopback port: the job's pods get in,
nothing else does, and junk, forged answers, slow clients and floods cost bounded memory and stop nothing."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from dslaunch import wire
from dslaunch.channel import door as admission
from dslaunch.channel import handshake
from dslaunch.pods import messages
from dslaunch.pods.assign import Shape
from dslaunch.pods.attempt import MAX_RELAYED_FAILURES, lost_why
from dslaunch.pods.coordinator import Coordinator
from dslaunch.pods.member import Ended, Joined, Orphaned, join
from tests.channel.clients import SimPod
from tests.pods.pods import free_port_pair

KEY, RUN = b"job-secret", "run-7"


@pytest.fixture
def door() -> Iterator[tuple[Coordinator, int]]:
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(3, 3, fixed=True))
    coordinator.listen(port)
    yield coordinator, port
    coordinator.close(0)


def _join_in_thread(
    port: int, node_rank: int, key: bytes = KEY, timeout: float = 15
) -> Future[Joined | Ended | Orphaned | str]:
    """A pod joining from a thread of its own: the future's result is what ``join`` returned."""
    me = (node_rank, f"pod-{node_rank}", -1)
    pool = ThreadPoolExecutor(1)
    future = pool.submit(join, ("127.0.0.1", port), key, RUN, me, deadline=time.monotonic() + timeout, stopped=[])
    pool.shutdown(wait=False)
    return future


def _result(future: Future[Joined | Ended | Orphaned | str], timeout: float = 20) -> Joined | Ended | Orphaned | str:
    return future.result(timeout)


def test_the_pods_join_and_start_the_attempt_the_coordinator_names(door: tuple[Coordinator, int]) -> None:
    coordinator, port = door
    pods = [_join_in_thread(port, r) for r in (1, 2)]
    assert coordinator.gather(time.monotonic() + 10, [])
    links, hosts = coordinator.start(3, "pod-0", lambda hosts: None)
    assert [p.node_rank for p in links] == [1, 2] and hosts == ["pod-0", "pod-1", "pod-2"]
    joined = [_result(p) for p in pods]
    assert [(j.attempt, j.node_rank, j.hosts) for j in joined if isinstance(j, Joined)] == [
        (3, r, ("pod-0",))
        for r in (1, 2)  # a fixed job's pods need the coordinator's host only (not N^2 bytes)
    ], joined


def test_an_elastic_jobs_pods_are_told_the_coordinators_host_and_the_attempts_size() -> None:
    """Not every host (N^2 bytes, and a line over the link's bound past about 3,700 pods): each pod lays the attempt
    out with the coordinator's host, its own, and ``podN`` for the others, whose events name their own hosts."""
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(3, 3, fixed=False))
    coordinator.listen(port)
    try:
        pods = [_join_in_thread(port, -1) for _ in (1, 2)]
        assert coordinator.gather(time.monotonic() + 10, [])
        coordinator.start(0, "pod-0", lambda hosts: None)
        joined = sorted((j for j in map(_result, pods) if isinstance(j, Joined)), key=lambda j: j.node_rank)
        assert [(j.node_rank, j.hosts, j.nnodes) for j in joined] == [(1, ("pod-0",), 3), (2, ("pod-0",), 3)]
        assert [j.every_host("me") for j in joined] == [("pod-0", "me", "pod2"), ("pod-0", "pod1", "me")]
    finally:
        coordinator.close(0)


def _exit(rank: int, node_rank: int, code: int, *, by_agent: bool = False) -> wire.RankExit:
    return wire.RankExit(rank, 0, node_rank, f"pod-{node_rank}", 100 + rank, code, None, time.time(), by_agent)


def test_the_pods_are_told_the_failures_and_losses_that_change_what_they_do(door: tuple[Coordinator, int]) -> None:
    """A rank that exited 0 or that its agent stopped changes no pod's decision, and relaying each to every pod made
    an attempt's end O(pods^2) lines (2 billion at 16,384 pods of 8 ranks): failed ranks and lost pods (the
    attempt's first ``MAX_RELAYED_FAILURES``) go to every other pod, never back to their own."""
    coordinator, port = door
    pods = [_join_in_thread(port, r) for r in (1, 2)]
    assert coordinator.gather(time.monotonic() + 10, [])
    coordinator.start(0, "pod-0", lambda hosts: None)
    joined = sorted((j for j in map(_result, pods) if isinstance(j, Joined)), key=lambda j: j.node_rank)
    coordinator.relay(_exit(0, 0, 0), 0)  # exited 0
    coordinator.relay(_exit(1, 0, 143, by_agent=True), 0)  # stopped by its agent
    coordinator.relay(wire.NodeLost(2, "pod-2", None, "gone"), 2)
    for n in range(MAX_RELAYED_FAILURES + 5):
        coordinator.relay(_exit(2 + n % 2, 1, 1), 1)  # node 1's own: never back to node 1
    coordinator.relay(wire.NodeLost(1, "pod-1", None, "gone"), 1)  # past the attempt's budget: thousands lost at once
    coordinator.finish(1, True)
    heard = {}
    for j in joined:
        told = [messages.from_coordinator(line, j.node_rank) for line in j.lines]
        heard[j.node_rank] = [type(m).__name__ if not isinstance(m, dict) else m["t"] for m in told]
    assert heard[1] == ["NodeLost", "end"], heard
    assert heard[2] == ["RankExit"] * (MAX_RELAYED_FAILURES - 1) + ["end"], heard


def test_a_pod_with_another_secret_or_node_rank_is_told_why(door: tuple[Coordinator, int]) -> None:
    _coordinator, port = door
    wrong = _result(_join_in_thread(port, 1, key=b"guess", timeout=2))
    assert isinstance(wrong, str) and "does not hold the job's secret" in wrong
    stranger = _result(_join_in_thread(port, 5, timeout=2))
    assert isinstance(stranger, str) and "node rank 5 is not one of this job's (0..2" in stranger
    first = _join_in_thread(port, 1)
    time.sleep(0.5)
    twin = _result(_join_in_thread(port, 1, timeout=2))
    assert isinstance(twin, str) and "node rank 1 has already joined" in twin
    assert not first.done()  # the first is still waiting for the start


def test_a_member_does_not_follow_a_coordinator_without_the_secret() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def impostor() -> None:
        conn, _ = server.accept()
        conn.sendall(handshake.challenge("a" * 32))
        heard = b""
        while heard.count(b"\n") < 2:  # the pod's hello, then its answer
            heard += conn.recv(4096)
        conn.sendall(handshake.welcome(b"not the key", RUN, "a" * 32, "b" * 32))
        time.sleep(1)
        conn.close()

    threading.Thread(target=impostor, daemon=True).start()
    got = join(("127.0.0.1", port), KEY, RUN, (1, "pod-1", -1), deadline=time.monotonic() + 3, stopped=[])
    server.close()
    assert got == "the coordinator could not prove it holds this job's secret"


def test_junk_floods_and_slow_clients_are_dropped_and_the_pods_still_get_in(
    door: tuple[Coordinator, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator, port = door
    monkeypatch.setattr(admission, "HANDSHAKE_TIME", 1.0)  # how long a silent client holds its slot
    monkeypatch.setattr(admission, "MAX_PENDING", 32)
    held: list[socket.socket] = []
    for _ in range(200):  # a flood of connections that never answer (a slowloris): more than MAX_PENDING
        held.append(socket.create_connection(("127.0.0.1", port)))
    for junk in (b"GET / HTTP/1.1\r\n\r\n", b"x" * 100_000, b'{"node_rank": 1, "mac": "00"}\n', b"\xff" * 50):
        s = socket.create_connection(("127.0.0.1", port))
        try:
            s.sendall(junk)
        except OSError:
            pass
        held.append(s)
    pods = [_join_in_thread(port, r, timeout=30) for r in (1, 2)]
    began = time.monotonic()
    ready = coordinator.gather(time.monotonic() + 25, [])
    took = time.monotonic() - began
    for s in held:
        s.close()
    assert ready, f"the pods could not join past the flood ({coordinator.turned_away} turned away)"
    assert took < admission.HANDSHAKE_TIME * 2 + 2, f"the flood held the pods up for {took:.1f} s"
    assert coordinator.turned_away >= 200 - admission.MAX_PENDING
    coordinator.start(0, "pod-0", lambda hosts: None)
    assert all(isinstance(_result(p), Joined) for p in pods)
    assert threading.active_count() < admission.MAX_PENDING + 20  # no thread per flooding connection


def test_a_pod_rejoining_while_the_last_attempt_drains_joins_the_next() -> None:
    """A pod takes the end of an attempt and joins the next at once, before the coordinator has seen its old
    connection close: it is the same pod coming back, not a second one of its node rank."""
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 2, fixed=True))
    coordinator.listen(port)
    try:
        first = _join_in_thread(port, 1)
        assert coordinator.gather(time.monotonic() + 10, [])
        coordinator.start(0, "pod-0", lambda hosts: None)
        old = _result(first)
        assert isinstance(old, Joined)
        ending = ThreadPoolExecutor(1).submit(coordinator.finish, 1, False)  # drains until the old link closes
        assert '"end"' in next(old.lines)
        again = _join_in_thread(port, 1)
        assert coordinator.gather(time.monotonic() + 10, []), "the pod coming back was not let in"
        assert not ending.done()  # the old connection is still open: its drain goes on
        old.link.close()
        ending.result(10)
        coordinator.start(1, "pod-0", lambda hosts: None)
        new = _result(again)
        assert isinstance(new, Joined) and new.attempt == 1, new
    finally:
        coordinator.close(0)


def test_500_pods_join_at_once_on_one_connection_each_with_no_thread_per_pod() -> None:
    """A synchronized start: every pod connects and says hello (as a pod does, at once), then every pod answers its
    challenge and is welcomed; the coordinator's threads stay what they were with none. Then a dropped pod is told
    to every other pod."""
    count = 500
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(count + 1, count + 1, fixed=True))
    coordinator.listen(port)
    try:
        threads = threading.active_count()
        pods = [SimPod(KEY, RUN, r) for r in range(1, count + 1)]
        for pod in pods:
            pod.connect(port)
            pod.hello()
        deadline = time.monotonic() + 20
        assert all(pod.answer(deadline) for pod in pods)
        assert all(pod.welcomed(deadline) for pod in pods)
        assert coordinator.gather(deadline, [])
        assert (coordinator.tries, coordinator.turned_away) == (count, 0)  # one connection each
        assert threading.active_count() <= threads
        attempt, _hosts = coordinator.start(0, "pod-0", lambda hosts: None)
        assert threading.active_count() <= threads
        for pod in pods:
            assert b'"t":"start"' in (pod.message(deadline) or b"")
        got: list[object] = []
        reading = threading.Thread(target=lambda: got.extend(attempt.lines()), daemon=True)  # supervise's one pump
        reading.start()
        dropped = time.monotonic()
        pods[7].close()
        told = [pod.message(time.monotonic() + 5) for pod in pods if pod is not pods[7]]
        took = time.monotonic() - dropped
        assert all(t is not None and b'"ev":"lost"' in t and b'"node_rank":8' in t for t in told), told[:3]
        assert took < 2.0, f"{took:.2f} s to tell {count - 1} pods"
        lost = got[0]  # the event as checked, not encoded again for the job loop to decode
        assert isinstance(lost, wire.NodeLost) and lost.node_rank == 8, got[:1]
    finally:
        coordinator.close(0)


def test_past_4096_pods_the_coordinator_beats_slower_and_its_pods_wait_as_many_beats() -> None:
    """At 16,384 pods the coordinator sends an idle pod a heartbeat every 4 s (``link.server_beat``: its sends were
    most of its quiet CPU) and a pod waits 16 s, 4 of its beats, as it waits 4 s for one each second up to 4,096;
    the coordinator still takes 4 s of a pod's silence as a loss."""
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 16384, fixed=False, last_call=0.1))
    coordinator.listen(port)
    try:
        pool = ThreadPoolExecutor(1)
        pod = pool.submit(
            join,
            ("127.0.0.1", port),
            KEY,
            RUN,
            (-1, "pod-1", -1),
            deadline=time.monotonic() + 15,
            stopped=[],
            pods=16384,
        )
        pool.shutdown(wait=False)
        assert coordinator.gather(time.monotonic() + 10, [])
        coordinator.start(0, "pod-0", lambda hosts: None)
        joined = _result(pod)
        assert isinstance(joined, Joined), joined
        assert coordinator.clock.beat == 4.0 and joined.link.sock.gettimeout() == joined.link.silence == 16.0
        said = lost_why("silent", "the coordinator", "", joined.link.silence)  # what the pod says when it goes
        assert said.startswith("nothing heard from the coordinator for 16 s"), said
        joined.link.close()
    finally:
        coordinator.close(0)
