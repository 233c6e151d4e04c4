"""The launcher's hang decision and culprit naming (job/hang.py), and the rank-side progress file, pure."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.bootstrap import progress
from dslaunch.job import hang
from dslaunch.plan import LaunchPlan
from tests.plans import make_plan, with_launcher


def _plan(timeout: float | None = 5.0) -> LaunchPlan:
    return make_plan(hosts=("a", "b"), slots=("0", "1"), hang_timeout=timeout)


AGENTS = (0, 1)  # the node ranks of the agents the launcher runs


def _watch(reports: dict[int, tuple[tuple[int, str, int, float], ...]]) -> hang.HangWatch:
    watch = hang.HangWatch(_plan(), AGENTS)
    watch.on_event(wire.Idle(0, True, 2))
    watch.on_event(wire.Idle(1, True, 2))
    assert watch.hung(set())
    watch.declare(0.0)
    for node, ranks in reports.items():
        watch.on_event(wire.Stacks(node, "ab"[node], ranks))
    return watch


def test_a_hang_needs_every_running_node_idle() -> None:
    watch = hang.HangWatch(_plan(), AGENTS)
    watch.on_event(wire.Idle(0, True, 2))
    assert not watch.hung(set())
    assert watch.hung({1})  # node 1 is done: node 0 alone is the job
    watch.on_event(wire.Idle(1, True, 2))
    watch.on_event(wire.Idle(0, False, 2))  # progress again
    assert not watch.hung(set())
    assert not hang.HangWatch(_plan(None), AGENTS).hung({0, 1})


def test_nodes_whose_ranks_all_ended_are_no_hang() -> None:
    """Both nodes' ranks ended (their Done is on its way): that is the job finishing, not a hang."""
    watch = hang.HangWatch(_plan(), AGENTS)
    watch.on_event(wire.Idle(0, True, 0))
    watch.on_event(wire.Idle(1, True, 0))
    assert not watch.hung(set())
    watch.on_event(wire.Idle(1, True, 1))
    assert watch.hung(set())


def test_mpirun_is_one_handle_for_every_node_and_one_launcher_per_node_watches_its_own() -> None:
    mpi = hang.HangWatch(with_launcher(_plan(), "openmpi"), (0, 1))  # its one handle carries both nodes
    mpi.on_event(wire.Idle(0, True, 2))
    assert not mpi.hung(set())  # node 1 (behind the same mpirun) still makes progress
    mpi.on_event(wire.Idle(1, True, 2))
    assert mpi.hung(set())
    mpi.declare(0.0)
    assert mpi.settled(set(), 0.0)  # no stacks to wait for
    assert mpi.result(set()).why == "no stacks with --launcher openmpi"
    pod = hang.HangWatch(with_launcher(_plan(), "node"), (1,))
    pod.on_event(wire.Idle(1, True, 2))
    assert pod.hung(set())


def test_the_rank_outside_the_collective_is_named() -> None:
    watch = _watch({0: ((0, "collective", 3, 6.0), (1, "collective", 3, 6.0)), 1: ((2, "running", 3, 6.0),)})
    assert watch.settled(set(), 0.0)  # both nodes reported
    result = watch.result(set())
    assert result.culprits == ((2, "b"),)
    assert result.why == "not in the collective the others wait in"


def test_without_stacks_in_a_collective_the_fewest_progress_is_named() -> None:
    ranks = ((0, "running", 7, 6.0), (1, "running", 2, 6.0), (2, "exited", 0, 9.0), (3, "running", 2, 8.0))
    result = _watch({0: ranks[:2], 1: ranks[2:]}).result(set())
    assert result.culprits == ((3, "b"),)  # 2 exited; 1 and 3 tie on count, 3 has been idle longer
    assert result.why.startswith("fewest heartbeats")
    assert hang.summary(result, _plan(), 124)[0] == (
        "dslaunch: hang: no rank made progress for 5 s; least progress: rank 3 (host b) [fewest heartbeats, "
        "steps and output writes]; stopped all 4 ranks (exit 124)"
    )


def test_a_node_that_does_not_report_is_named() -> None:
    watch = _watch({0: ((0, "running", 1, 6.0), (1, "running", 1, 6.0))})
    assert not watch.settled(set(), hang.REPORT_WAIT)  # waits for node 1 (REPORT_WAIT at most)
    assert watch.settled(set(), hang.REPORT_WAIT + 0.01)
    assert watch.settled({1}, 0.0)
    result = watch.result(set())
    assert result.unreported == (1,)
    assert "all equal" in result.why
    assert "dslaunch: no stacks report from node(s) 1" in hang.summary(result, _plan(), 124)


def test_progress_file_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank0.progress"
    path.write_bytes(b"\0" * progress.SIZE)
    monkeypatch.setenv(progress.ENV, str(path))
    monkeypatch.setattr(progress, "_opened", False)
    monkeypatch.setattr(progress, "_fd", None)
    monkeypatch.setattr(progress, "_beats", 0)
    progress.beat()
    progress.beat()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert progress.read_word(fd, progress.BEATS) == 2
    finally:
        os.close(fd)
        os.close(progress._fd or -1)


def test_heartbeat_outside_dslaunch_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    import dslaunch

    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setattr(progress, "_opened", False)
    monkeypatch.setattr(progress, "_fd", None)
    dslaunch.heartbeat()
    assert progress._fd is None


def test_the_agent_allows_start_up_longer_until_a_rank_first_makes_progress(tmp_path: Path) -> None:
    from dslaunch.agent import watch as agentside

    watch = agentside.ProgressWatch(_plan(2.0), 0, str(tmp_path))
    env: dict[str, str] = {}
    watch.add(0, env)
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"  # the flight recorder records (--hang-timeout only)
    watch.started(0, os.getpid())
    start = watch.ranks[0].last
    assert watch.tick(start + 10) == []  # importing torch, the rendezvous: no progress yet, not a hang
    assert watch.tick(start + agentside.STARTUP + 1) == [wire.Idle(0, True, 1)]
    fd = os.open(env[progress.ENV], os.O_RDWR)
    try:
        progress.write_word(fd, progress.BEATS, 1)  # dslaunch.heartbeat()
    finally:
        os.close(fd)
    now = start + agentside.STARTUP + 2
    assert watch.tick(now) == [wire.Idle(0, False, 1)]
    assert watch.tick(now + 1.5) == []
    assert watch.tick(now + 2.5) == [wire.Idle(0, True, 1)]  # progressed once: the plain timeout from now on
    watch.ended(0)
    assert watch.tick(now + 3.5) == [wire.Idle(0, True, 0)]  # no rank left: the node is finishing
    watch.close()


@pytest.mark.launch  # a stand-in rank process (sleep) gets the SIGQUIT
def test_an_nccl_rank_dumps_the_flight_recorder_on_a_stacks_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plumbing without a GPU: agent request -> the engine's trace thread -> torch's dump (a stand-in here:
    no NCCL on this machine) -> the agent's report -> the hang summary names the file."""
    import subprocess
    import sys
    import time
    import types

    from dslaunch.agent import watch as agentside

    plan = replace(_plan(5.0), log_dir=str(tmp_path))
    watch = agentside.ProgressWatch(plan, 0, str(tmp_path))
    env: dict[str, str] = {}
    watch.add(0, env)
    c10d = types.ModuleType("torch._C._distributed_c10d")
    c10d._dump_nccl_trace = lambda: b"pickled entries"  # type: ignore[attr-defined]
    torch_c = types.ModuleType("torch._C")
    torch_c._distributed_c10d = c10d  # type: ignore[attr-defined]
    fake = types.ModuleType("torch")
    fake._C = torch_c  # type: ignore[attr-defined]
    for name, module in (("torch", fake), ("torch._C", torch_c), ("torch._C._distributed_c10d", c10d)):
        monkeypatch.setitem(sys.modules, name, module)
    for name in (progress.ENV, progress.TRACE_ENV):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setattr(progress, "_opened", False)
    monkeypatch.setattr(progress, "_fd", None)
    progress.engine_ready("cuda:nccl,cpu:gloo")  # the engine, once its process group is up
    assert progress._fd is not None
    progress.write_word(progress._fd, progress.STARTED, 1)  # the bootstrap's stack printer
    stand_in = subprocess.Popen(["sleep", "30"])  # the rank's pid: it gets the SIGQUIT
    try:
        watch.started(0, stand_in.pid)
        assert watch.request_stacks() == []
        trace = Path(env[progress.TRACE_ENV])
        deadline = time.monotonic() + 5
        while not trace.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        assert trace.read_bytes() == b"pickled entries"
        (report,) = watch.tick(time.monotonic() + agentside.STACKS_WINDOW)
        assert isinstance(report, wire.Stacks) and report.traces == (str(trace),)
    finally:
        stand_in.kill()
        stand_in.wait()
        watch.close()
    hw = hang.HangWatch(plan, (0,))
    hw.on_event(wire.Idle(0, True, 1))
    hw.declare(0.0)
    hw.on_event(report)
    lines = hang.summary(hw.result(set()), plan, 124)
    assert (
        lines[-1] == f"dslaunch: NCCL flight recorder traces (each rank's line above says if it wrote one): a:{trace}"
    )
