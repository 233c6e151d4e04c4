"""The output plane with real launches: long lines, progress bars, blocked readers, bounded memory.

Ranks are trivial Python scripts (no torch). Figures with margins: the budgets are the issue's
(64 MB peak RSS, under 1 agent CPU-second for 20,000 bar updates); the measured values are far below.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.helpers import DSLAUNCH, SCRIPTS, job_processes, wait_until_gone
from tests.output.watch import Watch

pytestmark = pytest.mark.launch

P0 = b"[rank0]: "
RSS_BUDGET_MB = 64


def launch(*args: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*DSLAUNCH, *args], env={**os.environ, **(env or {})}, **kw)  # type: ignore[call-overload]


def test_a_20mb_line_arrives_whole_in_prefixed_pieces(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with out.open("wb") as f:
        proc = launch(str(SCRIPTS / "long_line.py"), env={"LONG_MB": "20"}, stdout=f)
        with Watch(proc.pid) as watch:
            assert proc.wait(timeout=60) == 0
    lines = out.read_bytes().split(b"\n")
    assert lines.pop() == b""
    assert all(line.startswith(P0) and len(line) <= len(P0) + 64 * 1024 for line in lines)
    body = b"".join(line[len(P0) :] for line in lines)
    assert body == b"".join(b"%08d" % block * 131072 for block in range(20))
    assert watch.agent_cpu < 3.0, f"the agent spent {watch.agent_cpu:.1f} CPU-s on 20 MB (quadratic?)"


def test_20000_bar_updates_leave_the_last_state_in_a_file_and_cost_little(tmp_path: Path) -> None:
    err = tmp_path / "err"
    with err.open("wb") as f:
        proc = launch(str(SCRIPTS / "bar.py"), stdout=subprocess.DEVNULL, stderr=f)
        with Watch(proc.pid) as watch:
            assert proc.wait(timeout=60) == 0
    bar = P0 + b"100%|####################| 20000/20000\n"
    assert err.read_bytes() == P0 + b"before the bar\n" + bar + P0 + b"after the bar\n"
    assert watch.agent_cpu < 1.0, f"the agent spent {watch.agent_cpu:.2f} CPU-s on 20,000 bar updates"


def test_a_terminal_sees_the_bar_live_with_its_prefix() -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the launcher, on a terminal
        os.environ.update(BAR_UPDATES="20000")
        os.execv(DSLAUNCH[0], [*DSLAUNCH, str(SCRIPTS / "bar.py")])
    seen = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not data:
            break
        seen += data
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, bytes(seen)
    updates = seen.count(b"\r" + P0)
    assert 1 <= updates < 2000, f"{updates} bar states written for 20,000 updates"
    assert seen.startswith(P0 + b"before the bar\r\n\r" + P0)
    assert seen.endswith(b"\r" + P0 + b"100%|####################| 20000/20000\r\n" + P0 + b"after the bar\r\n")


@pytest.mark.parametrize("stderr_too", [False, True], ids=["stdout-blocked", "stdout-and-stderr-blocked"])
def test_a_reader_that_never_reads_cannot_delay_fail_fast(tmp_path: Path, stderr_too: bool) -> None:
    """``dslaunch ... | sleep 30`` and ``2>&1 | sleep 30``: a pipe this test never reads."""
    run_id = "t" + uuid.uuid4().hex[:10]
    stamp = tmp_path / "stamp"
    read_end, write_end = os.pipe()
    args = ["--nproc-per-node", "2", "--run-id", run_id, "--log-dir", str(tmp_path / "logs")]
    proc = launch(
        *args,
        str(SCRIPTS / "flood_then_fail.py"),
        env={"STAMP": str(stamp)},
        stdout=write_end,
        stderr=write_end if stderr_too else subprocess.PIPE,
    )
    os.close(write_end)
    try:
        err = b"" if stderr_too else proc.communicate(timeout=30)[1]
        code = proc.wait(timeout=30)
        ended = time.time()
    finally:
        os.close(read_end)
    assert code == 7
    failed_at = float(stamp.read_text())
    # measured: 0.07 s (stdout blocked), 0.6 s (both: the summary waits 0.5 s for stderr)
    assert ended - failed_at < 2.0, f"the launcher exited {ended - failed_at:.1f} s after the rank failed"
    if not stderr_too:
        assert b"rank 1 (local_rank 1, node 0) on host localhost exited with code 7" in err
    records = [json.loads(line) for line in (tmp_path / "logs" / "launcher.jsonl").read_text().splitlines()]
    assert any("exited with code 7" in r.get("summary", "") for r in records)
    left = wait_until_gone(run_id, 5)
    assert not left, [p.cmdline() for p in left]
    assert not job_processes(run_id)


@pytest.mark.parametrize("reader", ["devnull", "stops-then-drains"])
def test_memory_stays_bounded_whatever_the_ranks_write(tmp_path: Path, reader: str) -> None:
    """Two ranks write 100 MiB each; a reader that stops for 2 s must not grow the launcher or agent."""
    mb = 100
    args = ("--nproc-per-node", "2", str(SCRIPTS / "flood.py"))
    if reader == "devnull":
        proc = launch(*args, env={"FLOOD_MB": str(mb)}, stdout=subprocess.DEVNULL)
        with Watch(proc.pid) as watch:
            assert proc.wait(timeout=120) == 0
    else:
        proc = launch(*args, env={"FLOOD_MB": str(mb)}, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        with Watch(proc.pid) as watch:
            time.sleep(2.0)  # the ranks' writes block meanwhile: back-pressure, not queues
            lines = 0
            while chunk := proc.stdout.read1(1 << 20):
                lines += chunk.count(b"\n")
            assert proc.wait(timeout=120) == 0
        assert lines == 2 * mb * 10485, "lines were lost"
    assert 0 < watch.launcher_mb <= RSS_BUDGET_MB, f"launcher peak RSS {watch.launcher_mb:.0f} MB"
    assert 0 < watch.agent_mb <= RSS_BUDGET_MB, f"agent peak RSS {watch.agent_mb:.0f} MB"
