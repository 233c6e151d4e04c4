"""What every pod must agree on (pods/shape.py), from the plans the CLI makes of two pods' environments, and the
coordinator refusing a pod given another shape (on a real loopback port): both values named on both sides, and a
fixed job's wait ended at once."""

from __future__ import annotations

import threading
import time

import pytest

from dslaunch.pods import shape
from dslaunch.pods.assign import Shape
from dslaunch.pods.coordinator import Coordinator
from dslaunch.pods.member import Joined, join
from tests.helpers import threads_since, until
from tests.plans import plan_of
from tests.pods.pods import free_port_pair

KEY, RUN = b"job-secret", "run-9"


def _pod(node_rank: int, **env: str) -> dict[str, str]:
    given = {
        "PET_NNODES": "2",
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": "127.0.0.1",
        "PET_MASTER_PORT": "29500",
        "PET_RDZV_ID": RUN,
        "CUDA_VISIBLE_DEVICES": "",
        **env,
    }
    return shape.of_plan(plan_of(["train.py", "--lr", "0.1"], env=given))


def test_pods_given_alike_agree() -> None:
    assert shape.mismatch(_pod(0), _pod(1), "pod 1 (h)") is None
    assert _pod(0)["ranks per pod"] == "2" and _pod(0)["program and arguments"] == "train.py --lr 0.1"


@pytest.mark.parametrize(
    ("env", "name", "theirs", "ours"),
    [
        ({"PET_NPROC_PER_NODE": "1"}, "ranks per pod", "'1'", "'2'"),
        ({"PET_MAX_RESTARTS": "3"}, "max restarts", "'3'", "'0'"),
        ({"DSLAUNCH_MESH": "tp=2"}, "mesh", "'dp_shard=-1,tp=2'", "'(none)'"),
    ],
)
def test_a_pod_given_otherwise_is_told_both_values_and_so_is_the_coordinator(
    env: dict[str, str], name: str, theirs: str, ours: str
) -> None:
    found = shape.mismatch(_pod(0), _pod(1, **env), "pod 1 (h)")
    assert found is not None
    for_the_pod, here = found
    assert f"{name}: {theirs} on this pod, {ours} on the coordinator" in for_the_pod
    assert f"{name}: {theirs} on pod 1 (h), {ours} here" in here


def test_a_long_value_keeps_its_head_and_a_digest() -> None:
    long_args = {"PET_NPROC_PER_NODE": "2"}
    plan_a = shape.of_plan(plan_of(["train.py", "x" * 500], env={**_env_only(), **long_args}))
    plan_b = shape.of_plan(plan_of(["train.py", "x" * 499 + "y"], env={**_env_only(), **long_args}))
    value = plan_a["program and arguments"]
    assert len(value) <= shape.VALUE_CHARS and "sha256" in value
    assert value != plan_b["program and arguments"]


def _env_only() -> dict[str, str]:
    return {"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "127.0.0.1", "PET_RDZV_ID": RUN}


def test_the_coordinator_refuses_a_pod_of_another_shape_and_a_fixed_job_stops_waiting() -> None:
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 2, fixed=True), agreed=_pod(0))
    coordinator.listen(port)
    try:
        began = time.monotonic()
        got = join(
            ("127.0.0.1", port),
            KEY,
            RUN,
            (1, "h", -1),
            deadline=began + 10,
            stopped=[],
            shape=_pod(1, PET_NPROC_PER_NODE="1"),
        )
        assert isinstance(got, str) and "ranks per pod: '1' on this pod, '2' on the coordinator" in got, got
        assert not coordinator.gather(time.monotonic() + 10, [])
        assert time.monotonic() - began < 3, "the coordinator waited on for a pod it refused"
        assert "ranks per pod: '1' on pod 1 (h), '2' here" in coordinator.mismatch
    finally:
        coordinator.close(255)


def test_a_pod_of_the_same_shape_gets_in() -> None:
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 2, fixed=True), agreed=_pod(0))
    coordinator.listen(port)
    try:
        pod = _pod(1)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(
                join, ("127.0.0.1", port), KEY, RUN, (1, "h", -1), deadline=time.monotonic() + 10, stopped=[], shape=pod
            )
            assert coordinator.gather(time.monotonic() + 10, [])
            coordinator.start(0, "h0", lambda hosts: None)
            assert isinstance(future.result(10), Joined)
    finally:
        coordinator.close(0)


def test_an_elastic_job_refuses_a_pod_of_another_shape_and_goes_on_waiting_for_others() -> None:
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 3, fixed=False), agreed=_pod(0))
    coordinator.listen(port)
    try:
        me, other = (-1, "h", -1), _pod(1, PET_NPROC_PER_NODE="1")
        got = join(("127.0.0.1", port), KEY, RUN, me, deadline=time.monotonic() + 10, stopped=[], shape=other)
        assert isinstance(got, str) and "ranks per pod: '1' on this pod" in got, got
        assert coordinator.mismatch == ""  # the job may still start with pods that match
        assert not coordinator.gather(time.monotonic() + 0.5, []) and coordinator.lacking() == "pods: 1 of at least 2"
    finally:
        coordinator.close(255)


def test_pods_refused_by_the_hundred_cost_the_coordinator_no_thread_each() -> None:
    """Each refusal is said on the coordinator's stderr, and no writer thread is left once they are said (one a line
    stayed for good: a stream of misfits grew the coordinator without bound)."""
    port = free_port_pair()
    coordinator = Coordinator(KEY, RUN, Shape(2, 3, fixed=False), agreed=_pod(0))
    coordinator.listen(port)
    try:
        with_coordinator = set(threading.enumerate())
        other = _pod(1, PET_NPROC_PER_NODE="1")
        for _ in range(100):
            got = join(
                ("127.0.0.1", port), KEY, RUN, (-1, "h", -1), deadline=time.monotonic() + 10, stopped=[], shape=other
            )
            assert isinstance(got, str) and "ranks per pod" in got, got
        assert until(lambda: not threads_since(with_coordinator)), threads_since(with_coordinator)
    finally:
        coordinator.close(255)
