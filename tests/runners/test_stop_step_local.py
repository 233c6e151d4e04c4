"""One stop step for the whole job, local runner (docs/stopping.md): lockstep ranks that call should_stop() once a
step all save the same step, however the stop is asked for; a rank that never calls it is signalled."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import wait_until_gone
from tests.runners.stop_steps import RANKS, TORCH_RANKS, finish, saved, start, stop_and_check, wait_ready

pytestmark = pytest.mark.launch


def _run_id() -> str:
    return "ss" + uuid.uuid4().hex[:10]


def _two_nodes(tmp_path: Path) -> list[str]:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n127.0.0.1 slots=2\n")
    return ["-H", str(hosts), "--launcher", "local", "--master-port", "0"]


def test_sigterm_to_the_launcher_stops_every_rank_at_one_step(tmp_path: Path) -> None:
    rid = _run_id()
    proc = start(["--nproc-per-node", "4", "--run-id", rid, RANKS], tmp_path)
    stop_and_check(proc, tmp_path, range(4), lambda: proc.send_signal(signal.SIGTERM))
    assert wait_until_gone(rid, 10) == []


def test_ctrl_c_to_the_group_stops_every_rank_of_two_nodes_at_one_step(tmp_path: Path) -> None:
    """SIGINT reaches the launcher and its forked agents at once (a terminal's Ctrl-C): both ask, one step."""
    proc = start([*_two_nodes(tmp_path), RANKS], tmp_path)
    stop_and_check(proc, tmp_path, range(4), lambda: os.killpg(proc.pid, signal.SIGINT), code=130)


def test_a_stop_asked_on_one_node_only_stops_every_node_at_one_step(tmp_path: Path) -> None:
    """SIGTERM to node 1's agent alone: its proposal is the stop request; the launcher asks node 0 and answers."""
    proc = start([*_two_nodes(tmp_path), RANKS], tmp_path)

    def term_node_1_agent() -> None:
        agents = psutil.Process(proc.pid).children()
        node1 = [a for a in agents if any(c.environ().get("NODE_RANK") == "1" for c in a.children())]
        assert len(node1) == 1, agents
        node1[0].send_signal(signal.SIGTERM)

    stop_and_check(proc, tmp_path, range(4), term_node_1_agent)


def test_a_rank_that_never_calls_it_is_signalled_and_a_rank_behind_runs_on_to_the_step(tmp_path: Path) -> None:
    """No barrier: rank 0 runs at a third of the others' pace, rank 2 never calls should_stop(). Rank 2 ends by the
    stop's SIGTERM; rank 0, many steps behind, runs on to the step the others stopped at."""
    env = {"NO_CALL": "2", "NO_BARRIER": "1", "STEP_TIME": "0.01", "RANK_DELAY": "0.02", "READY_AFTER": "20"}
    proc = start(["--nproc-per-node", "4", RANKS], tmp_path, env=env)
    wait_ready(tmp_path, range(4), proc)
    proc.send_signal(signal.SIGTERM)
    code, _out, err = finish(proc)
    got = saved(tmp_path, range(4))
    assert sorted(got) == [0, 1, 3] and len(set(got.values())) == 1 and code == 143, (got, err)


@pytest.mark.torch
def test_four_gloo_ranks_in_lockstep_save_one_step(tmp_path: Path) -> None:
    proc = start(["--nproc-per-node", "4", "--preload", "torch", TORCH_RANKS], tmp_path)
    stop_and_check(proc, tmp_path, range(4), lambda: proc.send_signal(signal.SIGTERM))


def test_a_lost_launcher_leaves_its_agent_to_decide_the_step_alone(tmp_path: Path) -> None:
    """SIGKILL to the launcher: its agent (parent-death SIGTERM, then its stdin's end) stops its ranks at one step."""
    proc = start(["--nproc-per-node", "4", RANKS], tmp_path)
    wait_ready(tmp_path, range(4), proc)
    agent = psutil.Process(proc.pid).children()[0]
    proc.kill()
    proc.wait(10)
    agent.wait(30)
    got = saved(tmp_path, range(4))
    assert sorted(got) == [0, 1, 2, 3] and len(set(got.values())) == 1, got
