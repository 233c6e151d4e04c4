"""Error records (issue 22, items 4, 8, 10): the agent's own observation bounds a rank's claimed failure time, an
error record is bounded where it is written and where it is read, and torch's @record is never overwritten by a
poorer record. Real launches, plus the pure rules as tables."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import psutil
import pytest

from dslaunch.agent.failures import ErrorRecord, parse_error_record, read_error_file
from dslaunch.agent.node_io import fs_clock_offset
from dslaunch.agent.rank_exits import CLOCK_SLACK, WRITE_SLACK, RankId, claimed_failure_time, rank_exit
from dslaunch.bootstrap.failure_file import error_record, write_error_file
from dslaunch.failure_bounds import MESSAGE_CHARS, READ_BYTES, TRACEBACK_CHARS, bounded
from tests.helpers import SCRIPTS, run_cli

FAST = {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
PEAK_LIMIT_KB = 60 << 10


# ---- real launches ---------------------------------------------------------------------------------------------------
@pytest.mark.launch
def test_a_forged_early_failure_time_does_not_steal_the_root_cause(tmp_path: Path) -> None:
    result = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", str(SCRIPTS / "forge_error.py")],
        env={**FAST, "OUT_DIR": str(tmp_path)},
    )
    assert result.returncode == 7, result.stderr
    assert "rank 1 (local_rank 1, node 0) on host localhost exited with code 7 [root cause" in result.stderr
    assert "forged" not in result.stderr
    assert "1 other rank(s) were stopped because of it" in result.stderr


def _vm_hwm_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError):
        return None


def _launch_measuring_peaks(tmp_path: Path, mode: str) -> tuple[int, str, int, int]:
    """Run huge_error.py on 2 ranks: (exit code, stderr, the launcher's peak kB, the agent's peak kB)."""
    peak_file = tmp_path / "launcher.peak"
    env = {**os.environ, **FAST, "MODE": mode, "PEAK_FILE": str(peak_file)}
    argv = [sys.executable, str(SCRIPTS / "peak_launcher.py"), "--nproc-per-node", "2", str(SCRIPTS / "huge_error.py")]
    with open(tmp_path / "out", "wb") as out, open(tmp_path / "err", "wb") as err:
        launcher = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
    agent_peak, deadline = 0, time.monotonic() + 60
    try:
        while launcher.poll() is None and time.monotonic() < deadline:
            try:
                agents = psutil.Process(launcher.pid).children()
            except psutil.NoSuchProcess:
                agents = []
            for agent in agents:  # the forked node agent
                agent_peak = max(agent_peak, _vm_hwm_kb(agent.pid) or 0)
            time.sleep(0.02)
    finally:
        launcher.kill()
        launcher.wait()
    stderr = (tmp_path / "err").read_text(errors="replace")
    return launcher.returncode, stderr, int(peak_file.read_text()), agent_peak


@pytest.mark.launch
def test_a_20_mb_exception_message_is_cut_in_the_summary_and_memory_stays_bounded(tmp_path: Path) -> None:
    code, stderr, launcher_peak, agent_peak = _launch_measuring_peaks(tmp_path, "raise")
    assert code == 1, stderr[-2000:]
    summary = stderr[stderr.index("dslaunch: job failed: rank 0") :]
    assert len(summary) < 200_000
    assert "  | Traceback (most recent call last):" in summary
    assert "  | ValueError: xxxx" in summary
    cut = re.search(r"\[\.\.\. (\d+) of (\d+) characters cut by dslaunch \.\.\.\]", summary)
    assert cut is not None, summary[:3000]
    assert int(cut[2]) > 20_000_000 and int(cut[2]) - int(cut[1]) <= 64 << 10
    assert re.search(r"characters cut by dslaunch \.\.\.\]\n  \| x{1000}", summary)  # the tail
    assert 0 < launcher_peak < PEAK_LIMIT_KB and 0 < agent_peak < PEAK_LIMIT_KB, (launcher_peak, agent_peak)


@pytest.mark.launch
def test_a_huge_error_file_written_by_the_rank_itself_is_not_read_whole(tmp_path: Path) -> None:
    code, stderr, launcher_peak, agent_peak = _launch_measuring_peaks(tmp_path, "file")
    assert code == 1, stderr[-2000:]
    summary = stderr[stderr.index("dslaunch: job failed: rank 0") :]
    assert len(summary) < 200_000
    assert "  | wrote a huge error file" in summary  # its stderr instead
    assert 0 < launcher_peak < PEAK_LIMIT_KB and 0 < agent_peak < PEAK_LIMIT_KB, (launcher_peak, agent_peak)


@pytest.mark.launch
def test_the_bootstraps_error_file_is_bounded(tmp_path: Path) -> None:
    env = {**FAST, "MODE": "raise"}
    result = run_cli(
        ["--nproc-per-node", "2", "--log-dir", str(tmp_path), str(SCRIPTS / "huge_error.py")], env=env, timeout=90
    )
    assert result.returncode == 1
    assert 0 < (tmp_path / "rank0.error.json").stat().st_size < 300_000


@pytest.mark.launch
@pytest.mark.torch
def test_torchs_record_survives_a_later_sys_exit(tmp_path: Path) -> None:
    result = run_cli(["--nproc-per-node", "1", "--log-dir", str(tmp_path), str(SCRIPTS / "torch_record.py")], env=FAST)
    assert result.returncode == 3, result.stderr
    summary = result.stderr[result.stderr.index("dslaunch: job failed: rank 0") :]
    assert "exited with code 3" in summary
    assert "  | Traceback (most recent call last):" in summary
    assert re.search(r"  \|   File .*torch_record\.py\", line \d+, in main", summary), summary
    assert "  | ValueError: the value torch recorded" in summary


# ---- the rule: when a rank's claimed failure time counts (agent/node_state.py) ---------------------------------------
def _record(failed_at: float | None, written_at: float | None, code: int | None = 1) -> ErrorRecord:
    return ErrorRecord("tb", failed_at, code, written_at)


@pytest.mark.parametrize(
    ("record", "signalled_at", "expected"),
    [
        pytest.param(_record(None, 100.0), None, None, id="no claimed time"),
        pytest.param(_record(100.0, None), None, None, id="no file time: nothing vouches for it"),
        pytest.param(_record(100.0, 100.003), None, 100.0, id="unsignalled, honest"),
        pytest.param(_record(100.0, 100.05), None, 100.0, id="within the write slack"),
        pytest.param(_record(0.0, 100.0), None, 100.0 - WRITE_SLACK, id="dated earlier than its file"),
        pytest.param(_record(200.0, 100.0), None, 100.0 + CLOCK_SLACK, id="dated later than its file"),
        pytest.param(_record(100.0, 100.003), 150.0, 100.0, id="written well before our signal"),
        pytest.param(_record(0.0, 100.003), 150.0, 100.003 - WRITE_SLACK, id="before our signal, dated too early"),
        pytest.param(_record(100.0, 150.004), 150.0, None, id="written after our signal: forged"),
        pytest.param(_record(100.0, 150.0), 150.0, None, id="written at our signal"),
        pytest.param(_record(100.0, 150.0 - CLOCK_SLACK / 2), 150.0, None, id="within a clock tick of it"),
        pytest.param(_record(149.9, 150.0 - 2 * CLOCK_SLACK), 150.0, 149.9, id="just before it"),
    ],
)
def test_claimed_failure_time(record: ErrorRecord, signalled_at: float | None, expected: float | None) -> None:
    assert claimed_failure_time(record, signalled_at) == (pytest.approx(expected) if expected is not None else None)


def test_a_record_forged_after_our_signal_is_the_teardowns_doing() -> None:
    who = RankId(rank=0, local_rank=0, node_rank=0, host="h", pid=9)
    forged = ErrorRecord("Traceback...\nRuntimeError: forged\n", 10.0, 1, written_at=400.005)
    result = rank_exit(who, 1, forged, signalled_at=400.0, wall=400.01)
    assert (result.code, result.ts, result.by_agent) == (1, 400.01, True)


# ---- bounds (dslaunch/failure_bounds.py) -----------------------------------------------------------------------------
@pytest.mark.parametrize("size", [0, 10, 1000, 1001, 5000, 20_000_000])
def test_bounded_keeps_head_and_tail_within_the_limit(size: int) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(min(size, 5000))) * max(size // 5000, 1)
    text = text[:size]
    out = bounded(text, 1000)
    assert len(out) <= 1000 and bounded(out, 1000) == out
    if size <= 1000:
        assert out == text
        return
    note = re.search(r"\n\[\.\.\. (\d+) of (\d+) characters cut by dslaunch \.\.\.\]\n", out)
    assert note is not None and int(note[2]) == size
    head, tail = out[: note.start()], out[note.end() :]
    assert text.startswith(head) and text.endswith(tail) and len(head) >= len(tail) > 400
    assert len(head) + len(tail) + int(note[1]) == size


# ---- reading: dslaunch's, torch's and merged records (agent/failures.py) ---------------------------------------------
def _torch(
    message: str = "ValueError: v", callstack: str = "Traceback...\nValueError: v\n", stamp: object = "1700000000"
) -> dict[str, object]:
    return {"message": {"message": message, "extraInfo": {"py_callstack": callstack, "timestamp": stamp}}}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        pytest.param(_torch(), ErrorRecord("Traceback...\nValueError: v\n", 1.7e9), id="torch: callstack and time"),
        pytest.param(_torch(callstack=""), ErrorRecord("ValueError: v", 1.7e9), id="torch: no callstack: message"),
        pytest.param(_torch(stamp="soon"), ErrorRecord("Traceback...\nValueError: v\n"), id="torch: bad time"),
        pytest.param(_torch(stamp="9" * 400), ErrorRecord("Traceback...\nValueError: v\n"), id="torch: huge time"),
        pytest.param(_torch(stamp=12), ErrorRecord("Traceback...\nValueError: v\n"), id="torch: time not text"),
        pytest.param(
            {**_torch(), "ts": 1700000000.5, "code": 3},
            ErrorRecord("Traceback...\nValueError: v\n", 1700000000.5, 3),
            id="merged: torch's text, our time and code",
        ),
        pytest.param(
            {**_torch(), "ts": 5.0, "code": 1, "traceback": "Traceback...\nKeyError: k\n"},
            ErrorRecord("Traceback...\nKeyError: k\n", 5.0, 1),
            id="merged: our own traceback first",
        ),
        pytest.param({"traceback": "t", "ts": 10**400}, ErrorRecord("t"), id="a time too large for a float"),
        pytest.param({"traceback": "t", "ts": float("nan")}, ErrorRecord("t"), id="not a number"),
    ],
)
def test_parse_error_record_reads_torchs_format_fully(data: dict[str, object], expected: ErrorRecord) -> None:
    assert parse_error_record(json.dumps(data)) == expected


def test_parsed_texts_are_bounded() -> None:
    record = parse_error_record(json.dumps({"traceback": "Traceback\n" + "x" * 500_000, "ts": 1.0, "code": 1}))
    assert record.error is not None and len(record.error) <= TRACEBACK_CHARS
    assert record.error.startswith("Traceback\nxxx") and "characters cut by dslaunch" in record.error


def test_read_error_file_stamps_the_kernels_change_time_which_utime_cannot_set_back(tmp_path: Path) -> None:
    path = tmp_path / "rank0.error.json"
    path.write_text(json.dumps({"traceback": "t", "ts": 1.0, "code": 2}))
    os.utime(path, (1.0, 1.0))  # mtime an age ago; ctime becomes now
    before = time.time()
    record = read_error_file(str(path))
    assert (record.error, record.failed_at, record.code) == ("t", 1.0, 2)
    assert record.written_at is not None and abs(record.written_at - before) < 5.0
    assert read_error_file(str(path), clock_offset=100.0).written_at == pytest.approx(record.written_at - 100.0)
    assert read_error_file(str(tmp_path / "missing")) == ErrorRecord()


def test_a_huge_error_file_is_not_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "rank0.error.json"
    with open(path, "w") as f:
        json.dump({"traceback": "y" * 20_000_000, "ts": 1.0, "code": 1}, f)
    tracemalloc.start()
    try:
        record = read_error_file(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record == ErrorRecord() and peak < 3 * READ_BYTES


def test_the_clock_of_a_local_folder_is_this_nodes(tmp_path: Path) -> None:
    assert fs_clock_offset(str(tmp_path)) == 0.0
    assert list(tmp_path.iterdir()) == []  # the probe is gone
    assert fs_clock_offset(str(tmp_path / "missing")) == 0.0


# ---- writing: never a poorer record over a richer one (bootstrap/failure_file.py) ------------------------------------
OURS = {"ts": 5.0, "code": 3, "rank": "0", "pid": 7}


def test_the_bootstraps_own_record_is_bounded() -> None:
    exc = ValueError("x" * 1_000_000)
    record = error_record(exc, "Traceback...\nValueError: " + "x" * 1_000_000, OURS, None)
    assert record["exception"] == "ValueError" and record["ts"] == 5.0 and record["code"] == 3
    assert len(record["message"]) <= MESSAGE_CHARS and len(record["traceback"]) <= TRACEBACK_CHARS
    assert record["traceback"].startswith("Traceback...\nValueError: xxx")


@pytest.mark.parametrize(
    ("text", "traceback"),
    [pytest.param("", None, id="a bare exit adds its time and code"), pytest.param("tb", "tb", id="and its traceback")],
)
def test_torchs_record_is_kept_and_ours_added_beside_it(text: str, traceback: str | None) -> None:
    torch = _torch(message="ValueError: " + "v" * 100_000)
    record = error_record(SystemExit(3), text, OURS, torch)
    assert {k: v for k, v in record.items() if k != "message"} == {
        **OURS,
        **({"traceback": traceback} if traceback else {}),
    }
    message = record["message"]
    assert message["extraInfo"] == torch["message"]["extraInfo"]  # type: ignore[index]
    assert len(message["message"]) <= MESSAGE_CHARS and message["message"].startswith("ValueError: vvv")


def test_write_error_file_merges_into_torchs_record(tmp_path: Path) -> None:
    path = tmp_path / "rank0.error.json"
    path.write_text(json.dumps(_torch()))  # as @record leaves it
    write_error_file(str(path), SystemExit(3), "", 3)
    record = parse_error_record(path.read_text())
    assert (record.error, record.code) == ("Traceback...\nValueError: v\n", 3)
    assert record.failed_at is not None and abs(record.failed_at - time.time()) < 5.0
    assert json.loads(path.read_text())["message"] == _torch()["message"]


@pytest.mark.parametrize("left", ["{not json", json.dumps({"traceback": "older", "ts": 1.0, "code": 1}), "[]"])
def test_write_error_file_replaces_anything_but_torchs_record(tmp_path: Path, left: str) -> None:
    path = tmp_path / "rank0.error.json"
    path.write_text(left)
    write_error_file(str(path), RuntimeError("now"), "Traceback...\nRuntimeError: now\n", 1)
    data = json.loads(path.read_text())
    assert (data["exception"], data["message"], data["code"]) == ("RuntimeError", "now", 1)
