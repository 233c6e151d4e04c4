"""The launcher's port for the agents that dial back (runners/remote/agent_links.py), with the agents' own client
(agent/dialback_client.py) on real loopback sockets: only the job's agents get in, a flood of idle connections
without the secret does not keep one out, and every line after the handshake is MACed: a real job agent
(``python -m dslaunch.agent --for-job --dial-file``) behind a man in the middle ends its link, and runs nothing,
when a line from its launcher is altered, replayed or injected on the way."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.agent import dialback_client
from dslaunch.agent.dialback_client import ADDR_VAR, DialBackError, connect_back
from dslaunch.channel import door, loop_link
from dslaunch.channel.link import HEARTBEAT, Link
from dslaunch.plan import LaunchPlan
from dslaunch.runners.remote.agent_links import AgentLinks
from tests.helpers import SCRIPTS, job_processes, threads_since, until, wait_for_file, wait_until_gone
from tests.plans import make_plan
from tests.pods.pods import Flood
from tests.runners.remote.relay import Relay

RUN = "r1"
ENV = {ADDR_VAR: "127.0.0.1"}


@pytest.fixture
def secret() -> bytes:
    return os.urandom(32)


@pytest.fixture
def links(secret: bytes) -> Iterator[AgentLinks]:
    links = AgentLinks(RUN, secret)
    yield links
    links.close()


def _dial(port: int, secret: bytes, run_id: str = RUN, timeout: float = 5.0) -> tuple[Link, str]:
    return connect_back(dialback_client.dialback_text(port, secret, "node1"), run_id, ENV, timeout)


def test_only_an_agent_that_holds_the_jobs_secret_takes_its_hosts_place(links: AgentLinks, secret: bytes) -> None:
    with pytest.raises(DialBackError, match="does not hold the job's secret"):
        _dial(links.port, os.urandom(32))  # another secret
    with pytest.raises(DialBackError, match="does not hold the job's secret"):
        _dial(links.port, secret, "r2")  # another job's
    assert links.take(["node1"], time.monotonic() + 0.3, lambda _h: False) == {}
    link, _host = _dial(links.port, secret)
    taken = links.take(["node1"], time.monotonic() + 5, lambda _h: False)
    assert list(taken) == ["node1"]
    assert taken["node1"].send_raw(b"stop\n") and next(link.lines()) == "stop\n"
    link.close()


def test_an_agent_that_sends_anything_but_heartbeats_is_cut_off(links: AgentLinks, secret: bytes) -> None:
    link, _host = _dial(links.port, secret)
    assert until(lambda: links.joined("node1"))  # the launcher keeps it once its welcome is out
    link.send({"t": "propose", "step": 3})  # MACed, but an agent has nothing to say
    assert list(link.lines()) == [] and link.why == "dropped"  # the launcher ended it
    assert until(lambda: not links.joined("node1"))


def test_an_agent_that_dials_again_replaces_its_old_link(links: AgentLinks, secret: bytes) -> None:
    first, _host = _dial(links.port, secret)
    assert until(lambda: links.joined("node1"))
    second, _host = _dial(links.port, secret)
    assert list(first.lines()) == [] and first.why == "dropped"  # the launcher ended the old one
    taken = links.take(["node1"], time.monotonic() + 5, lambda _h: False)
    assert taken["node1"].send_raw(b"stop-at 2\n") and next(second.lines()) == "stop-at 2\n"
    second.close()


def test_agents_cost_the_launcher_no_thread_each(secret: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """200 agents dial back with the agents' own client: the launcher serves them all on the one thread the port
    started (the thread-a-link port took 3 a pdsh agent: 600 here), each still gets its lines, and its close
    leaves no thread behind."""
    monkeypatch.setattr(loop_link, "SILENT", 60.0)  # these agents send no heartbeats; the test may be slow
    before = set(threading.enumerate())
    links = AgentLinks(RUN, secret)
    names = [f"node{i}" for i in range(200)]
    dialled: list[Link] = []
    try:
        with_port = set(threading.enumerate())
        for name in names:
            text = dialback_client.dialback_text(links.port, secret, name)
            dialled.append(connect_back(text, RUN, ENV, 10.0)[0])
        assert until(lambda: all(links.joined(n) for n in names), 10)
        with_agents = set(threading.enumerate())
        taken = links.take(names, time.monotonic() + 5, lambda _h: False)
        assert all(taken[n].send_raw(f"stop-at {i}\n".encode()) for i, n in enumerate(names))
        assert [next(link.lines()) for link in dialled] == [f"stop-at {i}\n" for i in range(len(names))]
        assert threads_since(with_agents) == []
    finally:
        links.close()
        for link in dialled:
            link.close()
    assert (len(with_port - before), len(with_agents - with_port)) == (1, 0)
    assert until(lambda: not threads_since(before)), threads_since(before)
    assert all(link.closed for link in taken.values())


def test_an_agent_gone_silent_is_ended_within_silent_and_half_a_heartbeat(
    links: AgentLinks, secret: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent whose connection stays open but says nothing (a partition, a hung host) is ended by the launcher's
    clock within ``SILENT`` + ``HEARTBEAT`` / 2; one that sends its heartbeats stays."""
    silent_for = 2.0
    monkeypatch.setattr(loop_link, "SILENT", silent_for)  # where the clock reads it
    beating = connect_back(dialback_client.dialback_text(links.port, secret, "node2"), RUN, ENV, 5.0)[0]
    beating.start_heartbeats()
    mute, _host = _dial(links.port, secret)  # no heartbeats
    began = time.monotonic()
    taken = links.take(["node1", "node2"], began + 5, lambda _h: False)
    ended: list[float] = []
    taken["node1"].when_ended(lambda: ended.append(time.monotonic()))
    try:
        assert taken["node1"].wait_closed(silent_for + 5), "the silent agent's link was not ended"
        assert taken["node1"].why == "silent"
        took = ended[0] - began
        assert silent_for - 0.1 <= took <= silent_for + HEARTBEAT / 2 + 1.0, took  # 1 s: a loaded machine
        assert not taken["node2"].closed  # dialled as long ago, and heard all along
        assert list(mute.lines()) == [] and mute.why == "dropped"
    finally:
        mute.close()
        beating.close()


def test_a_flood_of_idle_connections_without_the_secret_does_not_keep_an_agent_out(
    links: AgentLinks, secret: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(door, "MAX_PENDING", 32)  # fewer slots than flooding clients
    flood = Flood(links.port, 200, seconds=8)
    try:
        time.sleep(1.0)  # every slot taken, and each client dropped comes back at once
        began = time.monotonic()
        link, _host = _dial(links.port, secret, timeout=3.0)
        took = time.monotonic() - began
        taken = links.take(["node1"], time.monotonic() + 1, lambda _h: False)
        assert list(taken) == ["node1"], "the agent's link was not kept"
        assert took < 3
        assert flood.connections > 200  # the flood was dropped and came back
        assert links.turned_away > 100
        link.close()
    finally:
        flood.stop()


_ATTACKER = "run 0 {plan}\n"  # the old dial-back's whole line, sent bare as an injector would


class Tamper:
    """What the man in the middle does to the launcher's first line after the handshake (heartbeats pass)."""

    def __init__(self, how: str, attack: bytes) -> None:
        self.how, self.attack, self.done = how, attack, False

    def __call__(self, line: bytes, n: int) -> list[bytes]:
        if n < 2 or line.startswith(b'{"t":"hb"}\t') or self.done:
            return [line]
        self.done = True
        if self.how == "altered":  # node rank 0 -> 1: a run as another node
            return [line.replace(b"run 0 ", b"run 1 ", 1)]
        if self.how == "replayed":
            return [line, line]
        if self.how == "injected":
            return [self.attack, line]
        return [line]


@pytest.mark.launch
@pytest.mark.parametrize("how", ["as sent", "altered", "replayed", "injected"])
def test_a_line_altered_replayed_or_injected_on_the_way_ends_a_job_agents_link(
    tmp_path: Path, secret: bytes, how: str
) -> None:
    """A real job agent dials back through a man in the middle; its launcher sends it a ``run`` line. As sent, the
    attempt runs. Altered (another node rank), replayed, or preceded by an attacker's own ``run`` line with a plan
    of their own (all the old, unMACed dial-back let through), the agent's link ends at that line, neither plan
    runs, and the agent exits; the launcher's side of the link ends too."""
    run_id = f"mac{uuid.uuid4().hex[:8]}"
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()

    def plan_for(folder: str) -> LaunchPlan:
        return make_plan(
            hosts=("localhost",), run_id=run_id, target=str(SCRIPTS / "job.py"), python=sys.executable,
            args=("sleep", str(tmp_path / folder)), launcher="pdsh", shutdown_timeout=2,
        )  # fmt: skip

    attack = _ATTACKER.format(plan=wire.plan_to_b64(plan_for("theirs"))).encode()
    links = AgentLinks(run_id, secret)
    relay = Relay(links.port, tamper=Tamper(how, attack))
    dial_file = tmp_path / "dial"
    dial_file.write_text(dialback_client.dialback_text(relay.port, secret, "node1"))
    env = {**os.environ, ADDR_VAR: "127.0.0.1", "DSLAUNCH_RUN_ID": run_id}
    agent = subprocess.Popen(
        [sys.executable, "-m", "dslaunch.agent", "--for-job", "--dial-file", str(dial_file)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        taken = links.take(["node1"], time.monotonic() + 20, lambda _h: agent.poll() is not None)
        assert list(taken) == ["node1"], "the agent did not dial back"
        link = taken["node1"]
        assert link.send_raw(wire.job_run(0, plan_for("ours")))
        if how == "as sent":
            assert wait_for_file(str(tmp_path / "ours" / "ready.0"), 30), "the attempt did not run"
            assert agent.poll() is None
            link.close()  # the job's end: the agent tears its node down and exits
        agent.wait(timeout=20)
        assert link.wait_closed(5), "the launcher's side of the link did not end"
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        relay.close()
        links.close()
    assert agent.stderr is not None
    err = agent.stderr.read().decode()
    said = "the launcher's connection ended: a line failed its MAC" in err
    assert said == (how != "as sent"), err
    assert not (tmp_path / "theirs" / "ready.0").exists(), "the attacker's plan ran"
    if how in ("altered", "injected"):
        time.sleep(0.5)
        assert not (tmp_path / "ours" / "ready.0").exists(), "a plan ran from a line that failed its MAC"
    assert wait_until_gone(run_id, 10) == [], [p.pid for p in job_processes(run_id)]


def test_the_man_in_the_middle_relays_the_handshake_untouched(links: AgentLinks, secret: bytes) -> None:
    """The relay itself changes nothing unless told: the agent gets in through it, and a line comes through sealed
    (so the failures above are the MACs' doing)."""
    seen: list[bytes] = []

    def watch(line: bytes, _n: int) -> list[bytes]:
        seen.append(line)
        return [line]

    relay = Relay(links.port, tamper=watch)
    try:
        link, _host = _dial(relay.port, secret)
        taken = links.take(["node1"], time.monotonic() + 5, lambda _h: False)
        assert taken["node1"].send_raw(b"stop-at 9\n") and next(link.lines()) == "stop-at 9\n"
        assert [line[:10] for line in seen if line.startswith(b"stop-at 9")] == [b"stop-at 9\t"]
        link.close()
    finally:
        relay.close()
