"""Two pods in network namespaces, each with its own host name and address (testbeds/netns_cluster.py), and the
link to one taken down mid-job: no reset, no FIN, only silence. Both pods notice within the silence bound (4 s),
stop their ranks and end."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from dslaunch.channel.link import SILENT
from testbeds.netns_cluster import NetnsCluster
from tests.helpers import wait_for_file
from tests.pods.pods import JOB, finish, nothing_left, pod_env, start_pod

pytestmark = [pytest.mark.launch, pytest.mark.cluster]


def _in_pod(cluster: NetnsCluster, i: int) -> list[str]:
    """Run in namespace ``i`` under its own host name (a pod's)."""
    return [
        "ip",
        "netns",
        "exec",
        cluster.ns(i),
        "unshare",
        "--uts",
        "sh",
        "-c",
        'hostname "$0" && exec "$@"',
        cluster.names[i],
    ]


def _link(cluster: NetnsCluster, node: int, state: str) -> None:
    subprocess.run(["ip", "link", "set", f"{cluster.tag}h{node}", state], check=True, timeout=10)


def test_a_partitioned_pod_is_lost_on_both_sides_within_the_silence_bound(
    netns_cluster: NetnsCluster, tmp_path: Path
) -> None:
    run_id = f"podcut{os.getpid()}"
    addr = netns_cluster.addr(0)
    pods = [
        start_pod(pod_env(i, 29500, run_id, addr=addr), [JOB, "sleep", str(tmp_path)], prefix=_in_pod(netns_cluster, i))
        for i in (0, 1)
    ]
    try:
        assert all(wait_for_file(str(tmp_path / f"ready.{r}"), 30) for r in range(4)), finish(pods, 5)
        _link(netns_cluster, 1, "down")
        cut = time.monotonic()
        for pod in pods:
            pod.wait(SILENT + 10)
        took = time.monotonic() - cut
    finally:
        _link(netns_cluster, 1, "up")
        results = finish(pods, 10)
    (code0, _, err0), (code1, _, err1) = results
    assert (code0, code1) == (137, 137), (err0, err1)  # a lost pod: retryable (docs/kubernetes.md)
    assert f"pod 1 (node2) was lost: nothing heard from its launcher for {SILENT:g} s" in err0, err0
    assert f"pod 0 (node1) was lost: nothing heard from the coordinator for {SILENT:g} s" in err1, err1
    assert took < SILENT + 3, f"the pods ended {took:.1f} s after the cut"
    assert nothing_left(run_id) == []
