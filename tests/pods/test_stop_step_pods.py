"""One stop step for the whole job across pods (docs/stopping.md): SIGTERM to one pod's launcher only (a
``kubectl delete`` of one pod) stops every pod's lockstep ranks at one and the same step; the coordinator gathers
the pods' proposals and answers every pod; every pod exits 143."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.pods.pods import finish, free_port_pair, nothing_left, pod_env, start_pod
from tests.runners.stop_steps import RANKS, TORCH_RANKS, saved, wait_ready

pytestmark = [pytest.mark.launch]


def _stop_one_pod(tmp_path: Path, victim: int, script: str, *args: str) -> None:
    run_id = f"podstop{victim}{os.getpid()}{len(args)}"
    port = free_port_pair()
    env = {"OUT_DIR": str(tmp_path)}
    pods = [start_pod(pod_env(r, port, run_id, **env), [*args, script], cwd=tmp_path) for r in (0, 1)]
    try:
        wait_ready(tmp_path, range(4), pods[0])
    except AssertionError:
        raise AssertionError(finish(pods, 5)) from None
    pods[victim].send_signal(signal.SIGTERM)  # the launcher only: its pod is deleted, the other pod is not
    results = finish(pods)
    got = saved(tmp_path, range(4))
    errors = "\n".join(r[2] for r in results)
    assert sorted(got) == [0, 1, 2, 3] and len(set(got.values())) == 1, (got, errors)
    assert [r[0] for r in results] == [143, 143], errors
    assert nothing_left(run_id) == []


@pytest.mark.parametrize("victim", [1, 0], ids=["a member pod", "the coordinator's pod"])
def test_sigterm_to_one_pod_stops_every_pods_ranks_at_one_step(tmp_path: Path, victim: int) -> None:
    _stop_one_pod(tmp_path, victim, RANKS)


@pytest.mark.torch
def test_four_gloo_ranks_on_two_pods_save_one_step(tmp_path: Path) -> None:
    _stop_one_pod(tmp_path, 1, TORCH_RANKS, "--preload", "torch")
