"""The Slurm tasks' stop channel over real loopback sockets: node 0's task answers every task with the largest
proposal, a task without node 0 decides alone, and a task without the key, or one that sends junk, changes
nothing (runners/slurm/stop_channel.py)."""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.channel import link as thread_link
from dslaunch.channel import loop_link, secret
from dslaunch.channel.dial import open_link
from dslaunch.channel.link import Link
from dslaunch.job import stop_gather
from dslaunch.runners.slurm import in_step, stop_channel
from dslaunch.runners.slurm.stop_channel import Hub, Spoke
from dslaunch.slurmlib import layout
from tests.channel.clients import SimPod
from tests.helpers import threads_since, until
from tests.plans import make_plan

KEY, RUN = b"k" * 32, "run-1"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Answers:
    def __init__(self) -> None:
        self.got: queue.SimpleQueue[int] = queue.SimpleQueue()

    def __call__(self, step: int) -> None:
        self.got.put(step)

    def one(self, timeout: float = 5.0) -> int:
        step = self.got.get(timeout=timeout)
        with pytest.raises(queue.Empty):
            self.got.get(timeout=0.05)  # answered once
        return step


@pytest.fixture
def short_bound(monkeypatch: pytest.MonkeyPatch) -> float:
    monkeypatch.setattr(stop_gather, "GATHER_BOUND", 0.3)
    monkeypatch.setattr(stop_channel, "GATHER_BOUND", 0.3)
    monkeypatch.setattr(stop_channel, "ANSWER_TIME", 0.8)
    return 0.3


@pytest.fixture
def job() -> Iterator[tuple[Hub, list[Spoke]]]:
    port = _port()
    hub = Hub(KEY, RUN, 3, port)
    spokes = [Spoke(KEY, RUN, (n, f"node{n}"), [("127.0.0.1", port)]) for n in (1, 2)]
    try:
        assert all(s.wait_connected(5) for s in spokes)
        deadline = time.monotonic() + 5
        while hub.connected != {1, 2} and time.monotonic() < deadline:
            time.sleep(0.01)
        assert hub.connected == {1, 2}
        yield hub, spokes
    finally:
        for s in spokes:
            s.close()
        hub.close()


def test_every_node_gets_the_largest_proposal(job: tuple[Hub, list[Spoke]]) -> None:
    hub, spokes = job
    answers = [Answers() for _ in range(3)]
    for side, answer in zip((hub, *spokes), answers):
        side.begin(0, answer)
    spokes[0].propose(5)
    hub.propose(6)
    spokes[1].propose(None)  # no rank of that node calls should_stop()
    assert [a.one() for a in answers] == [6, 6, 6]


def test_a_node_that_has_not_proposed_by_the_bound_stops_at_the_step_too(
    job: tuple[Hub, list[Spoke]], short_bound: float
) -> None:
    hub, spokes = job
    answers = [Answers() for _ in range(3)]
    for side, answer in zip((hub, *spokes), answers):
        side.begin(2, answer)
    started = time.monotonic()
    spokes[1].propose(9)
    hub.propose(8)
    assert answers[0].one() == 9
    assert time.monotonic() - started >= short_bound * 0.9  # node 1 was waited for, up to the bound
    assert answers[1].one() == 9 and answers[2].one() == 9
    spokes[0].propose(12)  # too late: the step stands, and node 1 was answered already
    with pytest.raises(queue.Empty):
        answers[1].got.get(timeout=0.2)


def test_an_answer_of_another_attempt_is_not_taken(job: tuple[Hub, list[Spoke]]) -> None:
    hub, spokes = job
    old, new = Answers(), Answers()
    spokes[0].begin(0, old)
    hub.begin(1, Answers())
    spokes[1].begin(1, Answers())
    spokes[0].propose(3)  # attempt 0's, which the others have left
    spokes[0].begin(1, new)
    hub.propose(4)
    spokes[1].propose(4)
    spokes[0].propose(4)
    assert new.one() == 4
    assert old.got.empty() or old.one() == 3  # attempt 0's own answer, never attempt 1's


def test_without_node_0_a_node_decides_alone_once_the_answer_is_late(short_bound: float) -> None:
    spoke = Spoke(KEY, RUN, (1, "node1"), [("127.0.0.1", _port())])
    try:
        answer = Answers()
        spoke.begin(0, answer)
        started = time.monotonic()
        spoke.propose(7)
        assert answer.one() == 7 and time.monotonic() - started >= stop_channel.ANSWER_TIME * 0.9
        spoke.begin(1, answer)
        spoke.propose(None)
        assert answer.one() == 1  # no rank calls should_stop(): one that starts now stops at once
    finally:
        spoke.close()


def test_a_node_that_gave_up_on_node_0_decides_alone_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stop_channel, "CONNECT_TIME", 0.2)
    spoke = Spoke(KEY, RUN, (1, "node1"), [("127.0.0.1", _port())])
    try:
        time.sleep(0.5)
        assert any("cannot reach node 0's task" in note for note in spoke.notes), spoke.notes
        answer = Answers()
        spoke.begin(0, answer)
        started = time.monotonic()
        spoke.propose(7)
        assert answer.one() == 7 and time.monotonic() - started < 0.5
    finally:
        spoke.close()


def test_a_stop_before_the_nodes_connected_is_still_agreed() -> None:
    """The other task asks before node 0's task listens (its first tries refused): both wait for each other."""
    port = _port()
    spoke = Spoke(KEY, RUN, (1, "node1"), [("127.0.0.1", port)])
    late, hub = Answers(), None
    try:
        spoke.begin(0, late)
        spoke.propose(11)
        time.sleep(0.3)
        hub = Hub(KEY, RUN, 2, port)
        mine = Answers()
        hub.begin(0, mine)
        hub.propose(4)  # node 1 has not connected yet: waited for, not taken as gone
        assert mine.one() == 11 and late.one() == 11
    finally:
        spoke.close()
        if hub is not None:
            hub.close()


def test_a_node_whose_node_0_went_decides_alone(job: tuple[Hub, list[Spoke]], short_bound: float) -> None:
    hub, spokes = job
    answer = Answers()
    spokes[0].begin(0, answer)
    hub.close()
    spokes[0].propose(4)
    assert answer.one(timeout=3) == 4


@pytest.mark.parametrize("squatter", ["silent", "closes"])
def test_a_task_finds_node_0_on_a_fallback_port_past_a_squatter(squatter: str) -> None:
    """The usual port held by another process (one that accepts and never speaks, or hangs up): node 0's task
    listens on the next (in_step._listen), and the other task's handshake fails at the squatter and goes on."""
    with socket.create_server(("127.0.0.1", 0)) as squat:
        taken = squat.getsockname()[1]
        held: list[socket.socket] = []
        stop = threading.Event()

        def squatting() -> None:
            squat.settimeout(0.1)
            while not stop.is_set():
                try:
                    conn, _ = squat.accept()
                except OSError:
                    continue
                (held.append(conn) if squatter == "silent" else conn.close())

        threading.Thread(target=squatting, daemon=True).start()
        hub = Hub(KEY, RUN, 2, _port())
        spoke = Spoke(KEY, RUN, (1, "node1"), [("127.0.0.1", taken), ("127.0.0.1", hub.port)])
        try:
            assert spoke.wait_connected(15)
            mine, theirs = Answers(), Answers()
            hub.begin(0, mine)
            spoke.begin(0, theirs)
            spoke.propose(5)
            hub.propose(3)
            assert mine.one() == 5 and theirs.one() == 5
        finally:
            stop.set()
            spoke.close()
            hub.close()
            for conn in held:
                conn.close()


def test_a_task_that_reaches_no_port_names_them_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stop_channel, "CONNECT_TIME", 0.3)
    ports = [_port(), _port(), _port()]
    spoke = Spoke(KEY, RUN, (1, "node1"), [("127.0.0.1", p) for p in ports])
    try:
        deadline = time.monotonic() + 5
        while not spoke.notes and time.monotonic() < deadline:
            time.sleep(0.02)
        assert spoke.notes == [
            f"cannot reach node 0's task at 127.0.0.1:{ports[0]} (Connection refused), nor at its fallback ports "
            f"{ports[1]}, {ports[2]}: this node decides alone"
        ]
    finally:
        spoke.close()


def test_a_task_without_the_key_never_joins_and_is_not_waited_for(job: tuple[Hub, list[Spoke]]) -> None:
    hub, _spokes = job
    stranger = Spoke(b"wrong" * 8, RUN, (2, "node2"), [("127.0.0.1", hub.port)])
    try:
        assert not stranger.wait_connected(1.0)
        assert hub.connected == {1, 2}  # the real node 2 is still there
    finally:
        stranger.close()


def test_many_tasks_cost_node_0_no_thread_each_and_all_get_the_largest_proposal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 other tasks (raw sockets speaking the real handshake and sealed lines, tests/channel/clients.py) join
    node 0's hub: its threads do not grow with them (every connection on one event loop), every task gets the
    largest proposal, and once closed the hub leaves no thread behind."""
    tasks, bound = 300, 60.0
    monkeypatch.setattr(stop_gather, "GATHER_BOUND", bound)  # decided when every node proposed, not at the bound
    monkeypatch.setattr(stop_channel, "GATHER_BOUND", bound)
    monkeypatch.setattr(loop_link, "SILENT", bound)  # the simulated tasks send no heartbeats
    monkeypatch.setattr(thread_link, "SILENT", bound)
    before = set(threading.enumerate())
    hub = Hub(KEY, RUN, tasks + 1, _port())
    pods = [SimPod(KEY, RUN, n) for n in range(1, tasks + 1)]
    try:
        deadline = time.monotonic() + 60
        assert all(pod.join(hub.port, deadline) for pod in pods)
        while len(hub.connected) < tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(hub.connected) == tasks
        grown = threads_since(before)
        assert len(grown) <= 1, f"the hub runs {grown} for {tasks} tasks"
        mine = Answers()
        hub.begin(0, mine)
        for pod in pods:
            pod.send(json.dumps({"t": "propose", "attempt": 0, "step": 100 + pod.node_rank % 7}).encode())
        hub.propose(3)
        assert mine.one(timeout=30) == 106
        stop_at = {"t": "stop_at", "attempt": 0, "step": 106}
        assert [json.loads(pod.message(deadline) or b"null") for pod in pods] == [stop_at] * tasks
    finally:
        for pod in pods:
            if pod.sock is not None:
                pod.sock.close()
        hub.close()
    assert until(lambda: not threads_since(before)), threads_since(before)


def _propose(pod: SimPod, attempt: int, step: int) -> None:
    pod.send(json.dumps({"t": "propose", "attempt": attempt, "step": step}).encode())


def _next(pod: SimPod, deadline: float) -> object:
    got = pod.message(deadline)
    return None if got is None else json.loads(got)


def test_a_task_that_reconnects_replaces_its_link_and_hears_the_step_decided_meanwhile() -> None:
    hub = Hub(KEY, RUN, 2, _port())
    first, again = SimPod(KEY, RUN, 1), SimPod(KEY, RUN, 1)
    try:
        deadline = time.monotonic() + 10
        assert first.join(hub.port, deadline)
        mine, later = Answers(), Answers()
        hub.begin(0, mine)
        _propose(first, 0, 5)
        hub.propose(3)
        assert mine.one() == 5 and _next(first, deadline) == {"t": "stop_at", "attempt": 0, "step": 5}
        assert again.join(hub.port, deadline)
        assert _next(first, deadline) is None  # node 0's task ended the old connection
        assert _next(again, deadline) == {"t": "stop_at", "attempt": 0, "step": 5}  # decided while it was away
        assert hub.connected == {1}
        hub.begin(1, later)
        _propose(again, 1, 8)  # the new connection is node 1's
        hub.propose(2)
        assert later.one() == 8 and _next(again, deadline) == {"t": "stop_at", "attempt": 1, "step": 8}
    finally:
        for pod in (first, again):
            if pod.sock is not None:
                pod.sock.close()
        hub.close()


def test_a_task_that_leaves_while_node_0_waits_for_it_is_not_waited_for() -> None:
    hub = Hub(KEY, RUN, 3, _port())
    pods = [SimPod(KEY, RUN, n) for n in (1, 2)]
    try:
        deadline = time.monotonic() + 10
        assert all(pod.join(hub.port, deadline) for pod in pods)
        while hub.connected != {1, 2} and time.monotonic() < deadline:
            time.sleep(0.01)
        mine = Answers()
        hub.begin(0, mine)
        started = time.monotonic()
        _propose(pods[0], 0, 7)
        hub.propose(3)
        time.sleep(0.2)
        assert mine.got.empty()  # node 2 has not proposed: waited for
        assert pods[1].sock is not None
        pods[1].sock.close()
        assert mine.one() == 7 and time.monotonic() - started < stop_channel.GATHER_BOUND
        assert _next(pods[0], deadline) == {"t": "stop_at", "attempt": 0, "step": 7}
    finally:
        for pod in pods:
            if pod.sock is not None:
                pod.sock.close()
        hub.close()


@pytest.mark.parametrize(
    "message",
    [
        {"t": "propose", "attempt": 0, "step": 0},
        {"t": "propose", "attempt": 0, "step": (1 << 62) + 1},
        {"t": "propose", "attempt": 0, "step": "7"},
        {"t": "propose", "attempt": -1, "step": 7},
        {"t": "stop_at", "attempt": 0, "step": 7},  # node 0's message, from a task
        {"t": "propose", "attempt": 0},
    ],
)
def test_a_malformed_proposal_ends_that_link_and_decides_nothing(message: dict[str, object]) -> None:
    port = _port()
    hub = Hub(KEY, RUN, 2, port)
    try:
        answer = Answers()
        hub.begin(0, answer)
        link = _joined(hub, 1)
        link.send(message)
        assert link.wait_closed(5) and _gone(hub, 1)
        assert any("malformed" in note for note in hub.notes), hub.notes
        hub.propose(3)
        assert answer.one() == 3  # the node whose link ended is not waited for
    finally:
        hub.close()


def test_a_forged_line_ends_that_link() -> None:
    port = _port()
    hub = Hub(KEY, RUN, 2, port)
    try:
        link = _joined(hub, 1)
        link.sock.sendall(b'{"t":"propose","attempt":0,"step":9}\t' + b"0" * 32 + b"\n")  # no valid MAC
        assert _gone(hub, 1)
    finally:
        hub.close()


@pytest.mark.parametrize("node_rank", [0, 2, 99])
def test_a_task_of_no_other_node_is_refused(node_rank: int) -> None:
    port = _port()
    hub = Hub(KEY, RUN, 2, port)
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        got = open_link(sock, (KEY, RUN, (node_rank, "x", 0), None), time.monotonic() + 5)
        assert isinstance(got, str) and f"node {node_rank} is not one of 1..1" in got
        assert hub.connected == frozenset()
    finally:
        hub.close()


def _joined(hub: Hub, node_rank: int) -> Link:
    sock = socket.create_connection(("127.0.0.1", hub.port), timeout=5)
    got = open_link(sock, (KEY, RUN, (node_rank, "x", 0), None), time.monotonic() + 5)
    assert isinstance(got, Link), got
    got.start_reader()
    deadline = time.monotonic() + 5
    while node_rank not in hub.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert node_rank in hub.connected
    return got


def _gone(hub: Hub, node_rank: int) -> bool:
    deadline = time.monotonic() + 5
    while node_rank in hub.connected and time.monotonic() < deadline:
        time.sleep(0.01)
    return node_rank not in hub.connected


def test_node_0_listens_on_a_fallback_port_when_the_usual_one_is_held(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """in_step's side: the held port's holder is named (this process), the channel still opens."""
    with socket.create_server(("", 0)) as squat:
        store = squat.getsockname()[1] - 1
        plan = make_plan(
            launcher="slurm", run_id=RUN, nodes=layout.rank_nodes(("n1", "n2"), ("0", "1")), master_port=store
        )
        monkeypatch.setenv(secret.SECRET_VAR, "ab" * 32)
        hub = in_step._open_channel(plan, 0)
        try:
            assert isinstance(hub, Hub) and hub.port == layout.stop_channel_ports(store)[1]
        finally:
            if hub is not None:
                hub.close()
    err = capsys.readouterr().err
    assert f"the stop channel's port {store + 1} is in use (held by pid {os.getpid()} (" in err, err
    assert f"listening): it listens on {hub.port}" in err, err


@pytest.mark.parametrize(
    ("store", "ports"),
    [(20320, (20321, 24319, 28317)), (29500, (29501, 21499, 25497)), (31998, (31999, 23997, 27995))],
)
def test_the_stop_channel_has_two_fallback_ports_below_the_ephemeral_range(store: int, ports: tuple[int, ...]) -> None:
    assert layout.stop_channel_ports(store) == ports


@given(st.integers(1, 65535))
def test_fallback_ports_are_distinct_and_never_a_derived_store_port(store: int) -> None:
    ports = layout.stop_channel_ports(store)
    assert len(set(ports)) == 3 and all(layout.PORT_BASE < p < 32768 for p in ports[1:])
    assert all(p % 2 == 1 for p in ports[1:]) or store % 2 == 1  # odd beside an even (derived) store port
