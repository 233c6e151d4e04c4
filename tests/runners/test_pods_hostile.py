"""A real coordinator (one dslaunch pod on loopback) against pods that hold the job's secret and misbehave: the test
itself joins as pod 1 (pods/member.join) and sends what a buggy or compromised pod might. The coordinator ends
that pod's link with the reason, the job ends as for a lost pod, cleanly: no traceback, no rank blamed."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.pods.member import Joined, join
from tests.helpers import wait_for_file
from tests.runners.pods import JOB, SECRET, finish, free_port_pair, nothing_left, pod_env, start_pod

pytestmark = [pytest.mark.launch]


def _exit(rank: int, **changes: object) -> bytes:
    event = wire.RankExit(rank, rank % 2, 1, "pod-1", 4242, 0, None, time.time(), False, None, ())
    return (wire.MARKER + json.dumps({"ev": "exit", **asdict(event), **changes}) + "\n").encode()


BAD = {
    "done with a string code": (b'@dslaunch-event {"ev":"done","node_rank":1,"code":"0"}\n', "field 'code'"),
    "idle with a list node rank": (b'@dslaunch-event {"ev":"idle","node_rank":[1],"idle":true}\n', "'node_rank'"),
    "a second rank exit with a string time": (_exit(2) + _exit(3, ts="soon"), "field 'ts'"),
    "the coordinator's rank 0 reported failed": (_exit(0, code=9), "rank 0 is not one of node 1's"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_pod_with_the_secret_that_sends_a_malformed_message_is_lost_with_why(tmp_path: Path, case: str) -> None:
    line, why = BAD[case]
    run_id = f"podbad{sorted(BAD).index(case)}{os.getpid()}"
    port = free_port_pair()
    coordinator = start_pod(pod_env(0, port, run_id), [JOB, "sleep", str(tmp_path)], cwd=tmp_path)
    me = (1, "pod-1", -1)
    joined = join(("127.0.0.1", port + 1), SECRET.encode(), run_id, me, deadline=time.monotonic() + 20, stopped=[])
    assert isinstance(joined, Joined), (joined, finish([coordinator], 5))
    assert wait_for_file(str(tmp_path / "ready.1"), 20), finish([coordinator], 5)
    joined.link.send_raw(line)
    ((code, _out, err),) = finish([coordinator], 30)
    joined.link.close()
    assert code == 1, err
    assert "pod 1 (pod-1) was lost: its launcher sent a malformed message (" in err and why in err, err
    assert "Traceback" not in err and "root cause" not in err, err
    assert nothing_left(run_id) == []
