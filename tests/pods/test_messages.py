"""What an established pods' link may carry (pods/messages.py), and what the coordinator's and a member's handles do
with anything else: tables, fuzzing, and the handles over real socket pairs. A malformed message, or a pod
speaking for another node's ranks, ends that link with the reason and changes nothing else: no relay, no stop, no
verdict."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import asdict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch import wire
from dslaunch.channel.link import MAX_LINE, Link
from dslaunch.channel.loop_link import LoopLink
from dslaunch.pods import messages
from dslaunch.pods.assign import Shape
from dslaunch.pods.attempt import AttemptPods, Pod
from dslaunch.pods.coordinator import Coordinator
from dslaunch.pods.member import CoordinatorLink, Joined
from dslaunch.wire_check import Malformed

NODE1_RANKS = frozenset({2, 3})  # node 1's ranks in a job of 2 ranks per pod


def _exit(rank: int = 3, node_rank: int = 1, **changes: object) -> str:
    event = wire.RankExit(rank, rank % 2, node_rank, "pod-1", 42, 7, None, 1.7e9, False, None, ())
    return wire.MARKER + json.dumps({"ev": "exit", **asdict(event), **changes}) + "\n"


def _event(event: wire.Event) -> str:
    return wire.encode(event)


ACCEPTED_FROM_POD = [
    _exit(),
    _event(wire.Done(1, 7)),
    _event(wire.Idle(1, True, 2)),
    _event(wire.Stacks(1, "pod-1", ((2, "running", 1, 0.5),))),
    _event(wire.StopAsked(1, 15, 1.7e9)),  # a stop requested of this pod (its SIGTERM): the coordinator asks every pod
    _event(wire.Done(1, 143, 15, 1.7e9)),
    _event(wire.TimerWindow(1, 2, 3, 15, 5, 0.5, (("forward", 0.1, 0.02),))),  # its timers, for the coordinator
    _event(wire.Spawned(3, 1, 4242, "pod-1")),  # a rank started: the coordinator counts the job's ranks alive
    _event(wire.NodeWindows(1, 3, (2, 3), (15, 15), (5, 5), (0.5, 0.5), ("f",), ((),), (0.1, 0.1), (0.02, 0.02))),
]
REFUSED_FROM_POD = {
    "another pod's rank, the coordinator's rank 0": (_exit(rank=0), "rank 0 is not one of node 1's"),
    "another node's rank exit": (_exit(rank=0, node_rank=0), "RankExit for node 0 on node 1's link"),
    "another node's end": (_event(wire.Done(2, 0)), "Done for node 2 on node 1's link"),
    "another node's stop": (_event(wire.StopAsked(0, 15, 1.0)), "StopAsked for node 0 on node 1's link"),
    "another pod's ranks in its stacks": (_event(wire.Stacks(1, "pod-1", ((0, "running", 1, 0.5),))), "rank 0"),
    "a loss, which only the coordinator tells": (_event(wire.NodeLost(1, "pod-1")), "does not send NodeLost"),
    "a done with a string code": (_event(wire.Done(1, 0)).replace('"code":0', '"code":"0"'), "field 'code'"),
    "an idle with a list node rank": (_event(wire.Idle(1, True)).replace('"node_rank":1', '"node_rank":[1]'), "node"),
    "a rank exit with a string time": (_exit(ts="1700000000.0"), "field 'ts'"),
    "another pod's rank's timers": (_event(wire.TimerWindow(1, 0, 1, 5, 5, 0.5, ())), "rank 0 is not one of"),
    "timers with a negative time": (
        _event(wire.TimerWindow(1, 2, 1, 5, 5, 0.5, (("forward", 0.1, 0.02),))).replace("0.02", "-1"),
        "regions",
    ),
    "another pod's rank in its windows": (
        _event(wire.NodeWindows(1, 3, (2, 0), (15, 15), (5, 5), (0.5, 0.5), (), (), (), ())),
        "rank 0 is not one of node 1's",
    ),
    "windows with a column short of a rank": (
        _event(wire.NodeWindows(1, 3, (2, 3), (15, 15), (5, 5), (0.5, 0.5), ("f",), ((),), (0.1,), (0.02,))),
        "must hold a value per rank that timed each region",
    ),
    "another node's windows": (_event(wire.NodeWindows(0, 3, (2,), (15,), (5,), (0.5,), (), (), (), ())), "for node 0"),
    "another pod's rank started": (_event(wire.Spawned(0, 0, 4242, "pod-0")), "rank 0 is not one of node 1's"),
    "a control message": ('{"t":"stop"}\n', "not an event"),
    "output": ("hello\n", "not an event"),
}


@pytest.mark.parametrize("line", ACCEPTED_FROM_POD)
def test_a_pod_reports_its_own_node_and_ranks(line: str) -> None:
    assert messages.from_pod(line, 1, NODE1_RANKS) == wire.decode(line)


@pytest.mark.parametrize("case", sorted(REFUSED_FROM_POD))
def test_a_pod_speaking_out_of_turn_or_out_of_shape_is_malformed(case: str) -> None:
    line, why = REFUSED_FROM_POD[case]
    with pytest.raises(Malformed, match=why.replace("(", r"\(")):
        messages.from_pod(line, 1, NODE1_RANKS)


def test_the_coordinator_relays_other_nodes_only_and_its_controls_are_checked() -> None:
    assert messages.from_coordinator(_exit(rank=0, node_rank=0), 1) == wire.decode(_exit(rank=0, node_rank=0))
    with pytest.raises(Malformed, match="this pod's own node 1"):
        messages.from_coordinator(_exit(), 1)
    assert messages.from_coordinator('{"t":"end","code":3,"last":true}', 1) == {"t": "end", "code": 3, "last": True}
    asked = {"t": "stop", "signum": 15, "now": True}  # a requested stop, its grace ended
    assert messages.from_coordinator(json.dumps(asked), 1) == asked
    for bad in ('{"t":"end","code":"3","last":true}', '{"t":"start","attempt":0,"node_rank":1,"hosts":[1]}',
                '{"t":"signal","signum":"SIGQUIT"}', '{"t":"reboot"}', '{"t":"stop","now":1}', "[]"):  # fmt: skip
        with pytest.raises(Malformed):
            messages.from_coordinator(bad, 1)


# ---- fuzzing: nothing but Malformed is raised; what passes is bound and typed -------------------------------------
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)


@settings(max_examples=400, deadline=None)
@given(base=st.sampled_from(ACCEPTED_FROM_POD), data=st.data(), value=JSON)
def test_fuzzed_pod_events_are_bound_to_the_link_or_malformed(base: str, data: st.DataObject, value: object) -> None:
    obj = json.loads(base[len(wire.MARKER) :])
    obj[data.draw(st.sampled_from(sorted(obj)) | st.text(max_size=6))] = value
    try:
        event = messages.from_pod(wire.MARKER + json.dumps(obj) + "\n", 1, NODE1_RANKS)
    except Malformed:
        return
    assert getattr(event, "node_rank", 1) == 1
    if isinstance(event, (wire.RankExit, wire.Spawned)):
        assert event.rank in NODE1_RANKS
    if isinstance(event, wire.RankExit):
        assert type(event.ts) is float


@settings(max_examples=400, deadline=None)
@given(kind=st.sampled_from([*messages.FROM_COORDINATOR, "x"]), body=st.dictionaries(st.text(max_size=10), JSON))
def test_fuzzed_coordinator_messages_are_typed_or_malformed(kind: str, body: dict[str, Any]) -> None:
    try:
        message = messages.from_coordinator(json.dumps({"t": kind, **body}), 1)
    except Malformed:
        return
    assert isinstance(message, dict)
    required, optional = messages.FROM_COORDINATOR[message["t"]]
    assert set(required) <= set(message) <= {"t", *required, *optional}
    for name, value in message.items():
        if name != "t":
            assert (required.get(name) or optional[name]).take(value) == value


# ---- the handles: a rejected message ends the link and changes nothing else ------------------------------------
class _Local:
    """A member's own agent, as its CoordinatorLink sees it: records what it is asked."""

    node_rank, host = 1, "pod-1"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def stop(self) -> None:
        self.asked.append("stop")

    def signal(self, signum: int) -> None:
        self.asked.append(f"signal {signum}")


@pytest.mark.parametrize("case", sorted(REFUSED_FROM_POD))
def test_the_coordinator_ends_a_pods_link_for_a_bad_message_and_relays_nothing(case: str) -> None:
    coordinator = Coordinator(b"k", "run", Shape(3, 3, fixed=True))
    coordinator.loop.start()
    ends = [socket.socketpair() for _ in (1, 2)]
    links = [LoopLink(coordinator.clock, here, f"pod-{i}", None) for i, (here, _there) in enumerate(ends, 1)]
    pods = AttemptPods(
        coordinator.loop, coordinator.relay, [Pod(i, f"pod-{i}", link) for i, link in enumerate(links, 1)]
    )
    for pod in pods:
        pod.ranks = frozenset({2 * pod.node_rank, 2 * pod.node_rank + 1})
    coordinator.current = pods
    attached = threading.Event()
    coordinator.loop.call_soon(lambda: ([link.start() for link in links], pods.attach({}), attached.set()))
    assert attached.wait(5)
    ends[0][1].sendall(REFUSED_FROM_POD[case][0].encode() + _exit().encode())  # then a good one: not read
    rejected = messages.rejected.count
    lines = pods.lines()
    got = [next(lines)]  # decoded and checked by the handle (job/loop.py takes it as it is)
    assert messages.rejected.count == rejected + 1  # counted (the launcher's first is logged at debug)
    assert len(got) == 1 and isinstance(got[0], wire.NodeLost), got
    assert got[0].why.startswith("its launcher sent a malformed message ("), got[0]
    ends[1][1].settimeout(0.3)
    heard = b""
    while True:
        try:
            heard += ends[1][1].recv(1 << 16)
        except TimeoutError:
            break
    assert links[0].why == "malformed" and links[0].closed
    # the other pod hears of the loss, and nothing of what the lost pod said (not even the good line after)
    told = [line for line in heard.decode().splitlines(keepends=True) if line != '{"t":"hb"}\n']
    assert [wire.decode(line) for line in told] == got
    ends[1][1].close()  # the other pod goes too: the handle's stream ends, with nothing more from the first
    rest = list(lines)
    assert [(type(e).__name__, getattr(e, "node_rank", None)) for e in rest] == [("NodeLost", 2)], rest
    coordinator.close(0)


@pytest.mark.parametrize("bad", ['{"t":"end","code":"1","last":true}', '{"t":"stop","x":1}', _exit()])
def test_a_member_ends_the_coordinators_link_for_a_bad_message_and_obeys_nothing(bad: str) -> None:
    here, there = socket.socketpair()
    link = Link(here, "the coordinator")
    joined = Joined(link, link.lines(), 0, 1, ("pod-0", "pod-1"), 2)
    local = _Local()
    handle = CoordinatorLink(joined, local)  # type: ignore[arg-type]  # only stop and signal are used here
    there.sendall(bad.encode() + b"\n" + b'{"t":"stop"}\n{"t":"end","code":0,"last":true}\n')
    got = [wire.decode(line) for line in handle.lines()]
    assert len(got) == 1 and isinstance(got[0], wire.NodeLost) and "sent a malformed message" in got[0].why
    assert local.asked == [] and handle.verdict is None and link.why == "malformed"


def test_a_rank_exit_too_long_for_the_link_is_cut_to_fit_keeping_both_ends() -> None:
    """A 64 KiB traceback of non-ASCII text is ~6 times that once JSON-escaped: cut, it still reaches the other pods
    (a line over the bound would end the link and blame the pod instead of its rank)."""
    error = "Traceback (most recent call last):\n" + "é" * (64 << 10) + "\nValueError: the end"
    event = wire.RankExit(3, 1, 1, "pod-1", 42, 7, None, 1.7e9, False, error, tuple("ü" * 200 for _ in range(2000)))
    data = messages.encoded(event)
    assert len(data) <= MAX_LINE + 1
    got = messages.from_pod(data.decode(), 1, NODE1_RANKS)
    assert isinstance(got, wire.RankExit) and got.code == 7 and got.rank == 3
    assert got.error is not None and got.error.startswith("Traceback") and got.error.endswith("the end")
    assert "cut by dslaunch" in got.error and got.stderr_tail and got.stderr_tail[-1] == "ü" * 200
    small = wire.RankExit(3, 1, 1, "pod-1", 42, 7, None, 1.7e9, False, "short", ("a",))
    assert messages.encoded(small) == wire.encode(small).encode()
