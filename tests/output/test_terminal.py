"""The launcher as its terminal's one writer (output/terminal.py): a job over ssh, pdsh and MPI under a real pty (read
back through pyte) keeps the status line below the ranks' stdout, their stderr and the launcher's own lines, none
glued to it; the line is gone at the end; in a pipe nothing extra is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dslaunch.oslib.ports import listen_port
from dslaunch.output import terminal
from dslaunch.output.lanes import ErrLane
from dslaunch.output.sink import Sink
from dslaunch.output.status_line import ERASE, StatusLine
from dslaunch.runners import mpi
from testbeds.ssh_cluster import ADDRS, SshCluster
from tests.helpers import DSLAUNCH, SCRIPTS
from tests.output.screen import Screen
from tests.runners.remote.launch import RUNNERS, base_args, clean_env
from tests.runners.test_mpi import _need as need_mpi

STEPS = 30


def _drawn(raw: bytes) -> set[str]:
    """Every status line text the terminal was sent."""
    return {part.split(b"\r")[0].split(b"\n")[0].decode(errors="replace") for part in raw.split(b"dslaunch: ")[1:]
            if b" ranks | " in part.split(b"\n")[0]}  # fmt: skip


def _steps(lines: list[str], rank: int, word: str) -> list[int]:
    return [int(line.rsplit(" ", 1)[1]) for line in lines if f"rank {rank} {word} " in line]


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("runner", [*RUNNERS, mpi.OPENMPI.name, mpi.MPICH.name])
def test_a_remote_job_on_a_terminal_keeps_the_line_below_every_writer(
    ssh_cluster: SshCluster, runner: str, tmp_path: Path
) -> None:
    """mpirun's stderr (its ranks' with it) comes through the launcher too."""
    for flavour in (mpi.OPENMPI, mpi.MPICH):
        if runner == flavour.name:
            need_mpi(flavour)
    screen = Screen(rows=400, columns=150)
    port = "0" if runner in RUNNERS else str(listen_port(ADDRS[0]))  # mpirun has no port pick on node 0
    args = [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--master-port", port]
    args += ["--wall-clock-breakdown", "--breakdown-every", "10"]  # the launcher's own lines, mid-run
    proc = subprocess.Popen(
        [*DSLAUNCH, *args, str(SCRIPTS / "status_ranks.py"), str(STEPS), "0.1", "err"],
        stdin=subprocess.DEVNULL, stdout=screen.slave, stderr=screen.slave, cwd=tmp_path,
        env=clean_env({"TERM": "xterm"}), start_new_session=True,
    )  # fmt: skip
    try:
        code = screen.follow(proc, 90)
        lines = screen.lines()
        assert code == 0, lines
        drawn = _drawn(screen.raw)
        assert len(drawn) >= 2 and any("4/4 ranks" in d for d in drawn), (drawn, screen.raw[-3000:])
        assert not any(" ranks | " in line for line in lines), lines  # erased at the end, none left glued
        for rank in range(4):
            assert _steps(lines, rank, "step") == list(range(1, STEPS + 1)), lines  # every line whole, in order
            assert _steps(lines, rank, "note") == list(range(5, STEPS + 1, 5)), lines  # stderr too
        said = [line for line in lines if "rank" not in line or "breakdown" in line or "slowest" in line]
        assert sum(line.startswith("dslaunch: wall-clock breakdown, steps ") for line in said) >= 2, said
        assert all(line.startswith(("dslaunch: wall-clock", "  ")) for line in said), said  # the launcher's own
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        screen.close()


@pytest.mark.launch
@pytest.mark.cluster
def test_in_a_pipe_a_remote_job_writes_nothing_extra(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    args = [*base_args(ssh_cluster, "ssh", ["node1", "node2"], slots=1), "--master-port", "0"]
    result = subprocess.run(
        [*DSLAUNCH, *args, "--status-line", "auto", str(SCRIPTS / "status_ranks.py"), "10", "0.05", "err"],
        capture_output=True, timeout=60, env=clean_env({"TERM": "xterm"}), cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert ERASE not in result.stdout + result.stderr and b" ranks | " not in result.stdout + result.stderr
    assert result.stdout.count(b" step ") == 20 and result.stderr.count(b" note ") == 4


def test_while_owned_every_writer_queues_in_the_one_sink_and_gets_its_own_stream_back(tmp_path: Path) -> None:
    """What ``own`` takes over and gives back, here on a pty as fds 1 and 2 (no job: the routing alone)."""
    screen = Screen(rows=30, columns=80)
    saved = os.dup(1), os.dup(2)
    err = ErrLane()
    before = sys.stderr
    try:
        os.dup2(screen.slave, 1)
        os.dup2(screen.slave, 2)
        assert terminal.own(Sink(1), err, None) is None  # no status line asked for: nothing taken
        line = StatusLine()
        line.post("dslaunch: step 3 | 2/2 ranks | 0 restarts")
        assert terminal.own(Sink(1), None, line) is None  # a runner whose children write stderr themselves
        out = Sink(1)
        owner = terminal.own(out, err, line)
        assert owner is not None and sys.stderr is not before and line.queue is not None
        out.start()
        out.put("rank", [b"from a rank\n"])
        err.write(b"a node's stderr\n")
        print("the launcher's print", file=sys.stderr)
        assert terminal.say(line, b"the launcher's summary line\n")
        out.put("rank", [b"no newline yet"])
        screen.pump(1.0)
        assert screen.lines() == [
            "from a rank", "a node's stderr", "the launcher's print", "the launcher's summary line",
            "no newline yet", "dslaunch: step 3 | 2/2 ranks | 0 restarts",
        ], screen.lines()  # fmt: skip
        owner.release(2.0)
        assert sys.stderr is before and line.queue is None
        err.write(b"after\n")
        err.flush(2.0)
        screen.pump(0.5)
        assert screen.lines()[-1] == "after" and not any(" ranks | " in line for line in screen.lines())
    finally:
        sys.stderr = before
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        screen.close()
