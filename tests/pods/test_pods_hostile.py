"""A real coordinator (one dslaunch pod on loopback) against pods that hold the job's secret and misbehave: the test
itself joins as pod 1 (pods/member.join) and sends what a buggy or compromised pod might. The coordinator ends
that pod's link with the reason, the job ends as for a lost pod, cleanly: no traceback, no rank blamed. And pods
against what is not a coordinator (a squatter on the port) or a flood in front of one."""

from __future__ import annotations

import json
import os
import resource
import socket
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.channel import door
from dslaunch.pods import shape
from dslaunch.pods.member import Joined, join
from tests.helpers import wait_for_file
from tests.plans import plan_of
from tests.pods.pods import JOB, SECRET, Flood, finish, free_port_pair, nothing_left, pod_env, start_pod

pytestmark = [pytest.mark.launch]


def _exit(rank: int, **changes: object) -> bytes:
    event = wire.RankExit(rank, rank % 2, 1, "pod-1", 4242, 0, None, time.time(), False, None, ())
    return (wire.MARKER + json.dumps({"ev": "exit", **asdict(event), **changes}) + "\n").encode()


MALFORMED = "its launcher sent a malformed message ("
BAD = {  # what the test's pod 1 sends (sealed with its link's MACs, unless it is injected), what pod 0 says
    "done with a string code": (b'@dslaunch-event {"ev":"done","node_rank":1,"code":"0"}\n', MALFORMED, "'code'"),
    "idle with a list node rank": (b'@dslaunch-event {"ev":"idle","node_rank":[1],"idle":true}\n', MALFORMED, "node"),
    "a second rank exit with a string time": (_exit(2) + _exit(3, ts="soon"), MALFORMED, "field 'ts'"),
    "the coordinator's rank 0 reported failed": (_exit(0, code=9), MALFORMED, "rank 0 is not one of node 1's"),
    "injected: rank 0 reported failed without the link's MAC": (
        _exit(0, code=9, node_rank=0),
        "a message on its launcher's connection failed its MAC",
        "(altered, replayed, reordered or injected?)",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_pod_with_the_secret_that_sends_a_malformed_message_is_lost_with_why(tmp_path: Path, case: str) -> None:
    line, said, why = BAD[case]
    run_id = f"podbad{sorted(BAD).index(case)}{os.getpid()}"
    port = free_port_pair()
    args = [JOB, "sleep", str(tmp_path)]
    coordinator = start_pod(pod_env(0, port, run_id), args, cwd=tmp_path)
    given = shape.of_plan(plan_of(args, env=pod_env(1, port, run_id)))  # what a real pod 1 would send
    address, me = ("127.0.0.1", port + 1), (1, "pod-1", -1)
    joined = join(address, SECRET.encode(), run_id, me, deadline=time.monotonic() + 20, stopped=[], shape=given)
    assert isinstance(joined, Joined), (joined, finish([coordinator], 5))
    assert wait_for_file(str(tmp_path / "ready.1"), 20), finish([coordinator], 5)
    if case.startswith("injected"):
        joined.link.sock.sendall(line)  # into the stream, as a man in the middle would
    else:
        joined.link.send_raw(line)
    ((code, _out, err),) = finish([coordinator], 30)
    joined.link.close()
    assert code == 137, err  # that pod is lost to the job, as a dropped one is
    assert f"pod 1 (pod-1) was lost: {said}" in err and why in err, err
    assert "Traceback" not in err and "root cause" not in err, err
    assert nothing_left(run_id) == []


def test_a_pod_gives_up_on_a_port_that_accepts_and_never_speaks_at_its_join_timeout(tmp_path: Path) -> None:
    """A frozen coordinator or a squatter on the control port: join_timeout=2 is kept, not 2 + a 5 s read."""
    port = free_port_pair()
    squatter = socket.create_server(("127.0.0.1", port + 1))
    held: list[tuple[socket.socket, float]] = []

    def hold() -> None:
        while True:
            try:
                held.append((squatter.accept()[0], time.monotonic()))
            except OSError:
                return

    threading.Thread(target=hold, daemon=True).start()
    run_id = f"podsquat{os.getpid()}"
    pod = start_pod(pod_env(1, port, run_id, PET_RDZV_CONF="join_timeout=2"), [JOB, "echo"], cwd=tmp_path)
    pod.wait(30)
    ended = time.monotonic()
    ((code, _out, err),) = finish([pod])
    squatter.close()
    assert code == 255 and "cannot join the job: the coordinator at 127.0.0.1" in err, err
    assert held, "the pod never connected"
    took = ended - held[0][1]
    assert took < 2.8, f"join_timeout=2, but the pod gave up {took:.1f} s after its first connection"


def test_a_real_pod_joins_during_a_sustained_reconnect_flood(tmp_path: Path) -> None:
    """300 clients without the secret beyond the door's pending bound, reconnecting as soon as they are dropped, for
    12 s: pod 1, started once the flood is on with join_timeout=5, still joins and the job succeeds."""
    count = door.MAX_PENDING + 300
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:
        if hard != resource.RLIM_INFINITY and hard < count + 256:
            pytest.skip(f"the flood needs {count + 256} open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (count + 256, hard))
    run_id = f"podflood{os.getpid()}"
    port = free_port_pair()
    coordinator = start_pod(pod_env(0, port, run_id), [JOB, "echo"], cwd=tmp_path)
    time.sleep(1.5)  # pod 0 listens
    flood = Flood(port + 1, count, seconds=12)
    try:
        deadline = time.monotonic() + 10
        while flood.connections < count and time.monotonic() < deadline:
            time.sleep(0.1)
        member = start_pod(pod_env(1, port, run_id, PET_RDZV_CONF="join_timeout=5"), [JOB, "echo"], cwd=tmp_path)
        (code0, _, err0), (code1, _, err1) = finish([coordinator, member], 40)
    finally:
        flood.stop()
    assert (code0, code1) == (0, 0), (err0, err1)
    assert flood.connections > count, "the flood was never dropped"
    assert nothing_left(run_id) == []


def test_pods_of_another_shape_under_one_run_id_are_refused_with_both_values_not_left_to_hang(
    tmp_path: Path,
) -> None:
    """Pod 0 with 2 ranks, pod 1 with 1, the same run id and secret: nothing starts; both name both values."""
    run_id = f"podshape{os.getpid()}"
    port = free_port_pair()
    began = time.monotonic()
    pods = [
        start_pod(pod_env(0, port, run_id), [JOB, "echo"], cwd=tmp_path),
        start_pod(pod_env(1, port, run_id, PET_NPROC_PER_NODE="1"), [JOB, "echo"], cwd=tmp_path),
    ]
    (code0, out0, err0), (code1, out1, err1) = finish(pods, 30)
    took = time.monotonic() - began
    assert (code0, code1) == (255, 255), (err0, err1)
    host = os.uname().nodename
    assert f"ranks per pod: '1' on pod 1 ({host}), '2' here" in err0, err0
    assert "cannot join the job: the coordinator refused this pod: this pod does not match the job: " in err1, err1
    assert "ranks per pod: '1' on this pod, '2' on the coordinator" in err1, err1
    assert '"rank"' not in out0 + out1  # no rank ran
    assert took < 15, f"{took:.1f} s: the coordinator waited for the join timeout (20 s)"
    assert nothing_left(run_id) == []
