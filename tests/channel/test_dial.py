"""The client's side of every control channel (channel/dial.py): its pauses between tries (a table), and on real
loopback sockets: a server that listens late is reached within the bound, one that never listens is given up at
the bound without a busy loop, a refusal ends the dial at once unless another address may take it, and the link
it returns carries MACed lines both ways."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from dslaunch.channel import admit, door, handshake
from dslaunch.channel.dial import BACKOFF, Backoff, Failed, dial
from dslaunch.channel.door import Door
from dslaunch.channel.link import Link
from dslaunch.oslib.ports import listen_port

KEY, RUN = b"dial-secret", "run-d"


@pytest.mark.parametrize(
    ("tries", "rand", "pause"),
    [
        (1, 0.0, 0.025),  # half of the first pause
        (1, 1.0, 0.05),  # all of it
        (2, 0.0, 0.05),
        (3, 1.0, 0.2),
        (5, 1.0, 0.8),
        (6, 1.0, 1.0),  # capped at the longest
        (6, 0.0, 0.5),
        (60, 1.0, 1.0),  # no overflow however many tries
        (0, 1.0, 0.05),  # as the first
    ],
)
def test_the_pause_doubles_up_to_the_longest_and_is_a_random_half_to_all_of_it(
    tries: int, rand: float, pause: float
) -> None:
    assert BACKOFF.pause(tries, lambda: rand) == pytest.approx(pause)


def test_clients_that_fail_together_do_not_come_back_together() -> None:
    pauses = [Backoff(0.05, 1.0).pause(4) for _ in range(200)]
    assert all(0.2 <= p <= 0.4 for p in pauses)
    assert len({round(p, 3) for p in pauses}) > 50, "the pauses are not spread"


class Server:
    """A server of the job's channel on loopback: the door, then the welcome; ``refuse``: each peer is told so."""

    def __init__(self, port: int = 0, *, key: bytes = KEY, refuse: str = "") -> None:
        self.links: list[Link] = []
        self.refusing = refuse
        self.key = key
        self.door = Door(key, RUN, self._admit)
        self.sock = socket.create_server(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        self.door.open(self.sock)

    def _admit(self, conn: socket.socket, joiner: handshake.Joiner, server_nonce: str, rest: bytes) -> None:
        if self.refusing:
            admit.refuse(conn, self.refusing)
            return
        self.links.append(admit.welcome(conn, joiner, server_nonce, rest, key=self.key, run_id=RUN))

    def close(self) -> None:
        self.door.close()
        for link in self.links:
            link.close()


@pytest.fixture
def free_port() -> int:
    return listen_port("127.0.0.1")  # outside the ephemeral range: no test's outgoing connection takes it


WHO = (KEY, RUN, (3, "client-3", -1), None)


def test_a_server_that_listens_late_is_reached_within_the_bound(free_port: int) -> None:
    servers: list[Server] = []
    later = threading.Timer(0.6, lambda: servers.append(Server(free_port)))
    later.start()
    tried: list[Failed] = []
    began = time.monotonic()
    try:
        got = dial([("127.0.0.1", free_port)], WHO, began + 10, tried=tried)
        took = time.monotonic() - began
        assert isinstance(got, Link), got
        assert 0.6 <= took < 0.6 + BACKOFF.longest + 1.5, took  # at most a pause after it listens (and load)
        assert len(tried) >= 2 and all(f == Failed("unreachable", "Connection refused") for f in tried), tried
        assert got.send({"t": "hi"})  # the link is MACed both ways: the server reads it, and the other way round
        deadline = time.monotonic() + 5
        while not servers[0].links and time.monotonic() < deadline:  # kept once its welcome is out
            time.sleep(0.01)
        server_side = servers[0].links[0]
        assert next(server_side.lines()) == '{"t":"hi"}\n'
        assert server_side.send({"t": "back"}) and next(got.lines()) == '{"t":"back"}\n'
        got.close()
    finally:
        later.join()
        for server in servers:
            server.close()


def test_a_server_that_never_listens_is_given_up_at_the_bound_without_a_busy_loop(free_port: int) -> None:
    tried: list[Failed] = []
    began = time.monotonic()
    got = dial([("127.0.0.1", free_port)], WHO, began + 1.5, tried=tried)
    took = time.monotonic() - began
    assert got == Failed("unreachable", "Connection refused")
    assert 1.5 <= took < 2.5, took  # the bound, and at most one try's connect past it
    assert 2 <= len(tried) <= 10, f"{len(tried)} tries in 1.5 s"  # 0.05, 0.1, 0.2, 0.4, 0.8 s at most between


def test_a_refusal_ends_the_dial_at_once() -> None:
    server = Server(refuse="node 3 is not one of 1..2")
    try:
        began = time.monotonic()
        got = dial([("127.0.0.1", server.port)], WHO, began + 10, names=("the hub", "this client"))
        assert got == Failed("refused", "the hub refused this client: node 3 is not one of 1..2")
        assert time.monotonic() - began < 2  # not tried again until the bound (10 s)
    finally:
        server.close()


def test_another_secret_is_refused_at_its_hello_and_the_dial_ends() -> None:
    server = Server(key=b"another job's secret")
    try:
        got = dial([("127.0.0.1", server.port)], WHO, time.monotonic() + 10)
        assert isinstance(got, Failed) and got.kind == "refused", got
        assert "does not hold the job's secret" in got.why
        assert server.links == []
    finally:
        server.close()


def test_with_fallback_addresses_a_refusal_at_one_moves_on_to_the_next() -> None:
    """A fallback port that another job's server holds says no: the next may be this job's."""
    other, ours = Server(key=b"another job's secret"), Server()
    try:
        got = dial([("127.0.0.1", other.port), ("127.0.0.1", ours.port)], WHO, time.monotonic() + 10)
        assert isinstance(got, Link), got
        got.close()
    finally:
        other.close()
        ours.close()


def test_a_port_that_accepts_and_never_speaks_is_given_up_at_the_bound() -> None:
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        began = time.monotonic()
        got = dial([("127.0.0.1", squatter.getsockname()[1])], WHO, began + 1.0)
        took = time.monotonic() - began
    assert got == Failed("no handshake")
    assert took < 2.0, took


def test_a_stop_ends_the_dial_within_a_pause_slice(free_port: int) -> None:
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    began = time.monotonic()
    got = dial([("127.0.0.1", free_port)], WHO, began + 10, stopped=stop.is_set, backoff=Backoff(5.0, 5.0))
    assert isinstance(got, Failed)
    assert time.monotonic() - began < 2.0  # not the 5 s pause


def test_clients_pushed_out_of_the_doors_proven_set_try_again_and_all_get_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many clients at once: the door keeps few that owe their answer, and drops the oldest for a newer one. A
    client whose connection closes after its answer was pushed out (its hello proved the key): it tries again."""
    monkeypatch.setattr(door, "MAX_PROVEN", 2)
    server = Server()
    start = threading.Barrier(30)
    got: list[Link | Failed] = []

    def client(n: int) -> None:
        start.wait()
        got.append(dial([("127.0.0.1", server.port)], (KEY, RUN, (n, f"c{n}", -1), None), time.monotonic() + 20))

    clients = [threading.Thread(target=client, args=(n,)) for n in range(30)]
    try:
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(30)
        assert [g for g in got if not isinstance(g, Link)] == [] and len(got) == 30
        assert server.door.turned_away > 0, "no client was pushed out: the case was not exercised"
    finally:
        for link in got:
            if isinstance(link, Link):
                link.close()
        server.close()
