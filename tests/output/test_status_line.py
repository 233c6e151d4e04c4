"""The status line at the bottom of a terminal (output/status_line.py, the sink's side in output/sink.py): the line
fitted to the terminal, its page shared with a forked agent, the screen a real pty shows (read back through the
pyte terminal emulator), and a real job under a pty and in a pipe."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dslaunch.observe import live
from dslaunch.output.sink import Sink
from dslaunch.output.status_line import ERASE, MAX_TEXT, StatusLine, fit
from tests.helpers import DSLAUNCH, SCRIPTS
from tests.output.screen import Screen


@pytest.mark.parametrize(
    ("text", "columns", "expected"),
    [
        (b"step 5 | 2/2 ranks", 80, b"step 5 | 2/2 ranks"),
        (b"abcdef", 4, b"abc"),  # one cell short of the width: the cursor never wraps
        (b"a\x1b[31mb\tc\r\n", 80, b"a[31mbc"),  # no control character reaches the terminal
        ("日本語".encode(), 6, "日本".encode()),  # wide characters take two cells
        (b"\xff\xfe ok", 80, "\ufffd\ufffd ok".encode()),
        (b"x", 1, b""),
        (b"", 80, b""),
    ],
)
def test_the_line_fits_one_terminal_row(text: bytes, columns: int, expected: bytes) -> None:
    assert fit(text, columns) == expected


@pytest.mark.launch
def test_a_forked_child_reads_what_the_parent_posts_after_the_fork() -> None:
    line = StatusLine()
    line.post("first")
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.read(go_r, 1)
        os.write(w, line.read())
        os._exit(0)
    os.close(w)
    line.post("dslaunch: step 7 " + "x" * 5000)  # longer than the page: cut
    os.write(go_w, b"1")
    got = os.read(r, 8192)
    os.waitpid(pid, 0)
    assert got.startswith(b"dslaunch: step 7 x") and len(got) == MAX_TEXT


def test_the_status_lines_words() -> None:
    state = {
        "state": "running", "step": 812, "steps_per_second": 19.85, "ranks": 16, "ranks_alive": 16, "restarts": 1,
        "slowest": {"rank": 5, "host": "b", "region": "forward", "seconds": 0.21, "median": 0.105},
        "started": 1000.0,
    }  # fmt: skip
    assert live.status_line(state, 1000.0 + 3723) == (
        "dslaunch: step 812 (19.9 steps/s) | 16/16 ranks | 1 restart | "
        "slowest rank 5 on b: forward 0.210 s, median 0.105 s | 1:02:03"
    )
    early = {"state": "running", "ranks": 4, "ranks_alive": 2, "restarts": 0, "started": 1000.0}
    assert live.status_line(early, 1005.0) == "dslaunch: running | 2/4 ranks | 0 restarts | 0:00:05"


@pytest.fixture
def term() -> Screen:
    screen = Screen()
    yield screen
    screen.close()


def _drawing(term: Screen, line: StatusLine) -> Sink:
    """A started sink on the pty that draws ``line`` (posted to by the test as it goes)."""
    sink = Sink(term.slave, live=True)
    sink.status_line = line
    sink.start()
    return sink


def test_the_sink_keeps_the_line_below_its_output_and_erases_it_at_the_end(term: Screen) -> None:
    line = StatusLine()
    line.post("dslaunch: step 1")
    sink = _drawing(term, line)
    sink.put("a", [b"line one\n"])
    term.pump()
    assert term.lines() == ["line one", "dslaunch: step 1"]
    line.post("dslaunch: step 2")  # redrawn within REDRAW, with nothing else written
    sink.put("b", [b"line two\n", b"line three\n"])
    term.pump(0.8)
    assert term.lines() == ["line one", "line two", "line three", "dslaunch: step 2"]
    sink.end_status_line(2.0)
    term.pump()
    assert term.lines() == ["line one", "line two", "line three"]
    assert term.raw.count(b"dslaunch: step 2") >= 1


def test_output_left_without_a_newline_keeps_its_line(term: Screen) -> None:
    """Output ends mid-line before any status line is posted: the line, once drawn, goes below it, never glued."""
    line = StatusLine()
    sink = _drawing(term, line)
    sink.put("a", [b"partial"])
    term.pump()
    line.post("dslaunch: status")
    term.pump(0.8)
    assert term.lines() == ["partial", "dslaunch: status"]
    sink.put("a", [b"more\n"])
    term.pump(0.8)
    assert term.lines() == ["partial", "more", "dslaunch: status"]
    sink.end_status_line(2.0)


def test_a_ranks_progress_bar_takes_the_last_line_while_it_lasts(term: Screen) -> None:
    sink = Sink(term.slave, live=True)
    sink.status_line = StatusLine()
    sink.status_line.post("dslaunch: status")
    sink.start()
    sink.put("a", [b"before\n"])
    term.pump()
    sink.put("a", [], bar=b"\r 50%|#####     |")
    term.pump(0.8)
    assert term.lines() == ["before", " 50%|#####     |"]  # no status line glued to the bar, none drawn over it
    sink.put("a", [b"\r100%|##########|\n"])  # the bar's line ends: the status line comes back below it
    term.pump(0.8)
    assert term.lines() == ["before", "100%|##########|", "dslaunch: status"]
    sink.end_status_line(2.0)


def _run_under_pty(args: list[str], rows: int = 200) -> tuple[int, Screen]:
    screen = Screen(rows=rows, columns=120)
    env = {**os.environ, "TERM": "xterm"}
    proc = subprocess.Popen(
        [*DSLAUNCH, "--master-port", "0", *args],
        stdin=subprocess.DEVNULL, stdout=screen.slave, stderr=screen.slave, env=env, start_new_session=True,
    )  # fmt: skip
    return screen.follow(proc, 60), screen


@pytest.mark.launch
def test_a_job_on_a_terminal_shows_the_status_line_and_leaves_only_its_output() -> None:
    code, screen = _run_under_pty(["--nproc-per-node", "2", str(SCRIPTS / "status_ranks.py"), "40", "0.05", "bar"])
    try:
        assert code == 0, screen.lines()
        drawn = {int(part.split()[2]) for part in screen.raw.decode(errors="replace").split("dslaunch: step ")[1:]
                 for part in ["x x " + part] if part.split()[2].isdigit()}  # fmt: skip
        assert len(drawn) >= 2, screen.raw[-2000:]  # drawn, and redrawn as the steps went (once a second)
        lines = screen.lines()
        assert not any("dslaunch: step" in line or "ranks |" in line for line in lines), lines  # erased at the end
        for rank in (0, 1):
            got = [line for line in lines if line.startswith(f"[rank{rank}]") or f"rank {rank} step" in line]
            steps = [int(line.rsplit(" ", 1)[1]) for line in got if f"rank {rank} step" in line]
            expected = [s for s in range(1, 41) if not (rank == 0 and 5 <= s < 10)]
            assert steps == expected, lines  # every line whole, in order: none glued to the status line
        assert any(line.endswith("bar 5/5") for line in lines), lines  # the bar's last state stays
    finally:
        screen.close()


@pytest.mark.launch
def test_in_a_pipe_nothing_extra_is_written(tmp_path: Path) -> None:
    result = subprocess.run(
        [*DSLAUNCH, "--master-port", "0", "--nproc-per-node", "2", str(SCRIPTS / "status_ranks.py"), "15", "0.05"],
        capture_output=True, timeout=60, env={**os.environ, "TERM": "xterm"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert ERASE not in result.stdout + result.stderr and b"dslaunch: step" not in result.stdout
    assert result.stdout.count(b" step ") == 30


@pytest.mark.launch
def test_the_option_refuses_other_words() -> None:
    result = subprocess.run([*DSLAUNCH, "--status-line", "sometimes", "x.py"], capture_output=True, text=True)
    assert result.returncode == 2 and "'sometimes' is not one of 'auto', 'on', 'off'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.launch
def test_a_coordinator_pod_on_a_terminal_shows_the_whole_jobs_line(tmp_path: Path) -> None:
    """Pods (one launcher a node): the coordinator's own agent is its terminal's one writer and draws the job's
    line, every pod's ranks counted; the other pod, in a pipe, writes nothing extra."""
    from tests.pods.pods import finish, free_port_pair, pod_env, start_pod

    port, run_id = free_port_pair(), f"podline{os.getpid()}"
    screen = Screen(rows=200, columns=120)
    args = [str(SCRIPTS / "status_ranks.py"), "25", "0.1"]
    coordinator = subprocess.Popen(
        [*DSLAUNCH, "--shutdown-timeout", "2", *args], stdin=subprocess.DEVNULL, stdout=screen.slave,
        stderr=screen.slave, env=pod_env(0, port, run_id, TERM="xterm"), cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    other = start_pod(pod_env(1, port, run_id, TERM="xterm"), args, cwd=tmp_path)
    try:
        code0 = screen.follow(coordinator, 60)
        ((code1, out1, err1),) = finish([other])
        assert (code0, code1) == (0, 0), (screen.lines(), err1)
        assert b"4/4 ranks" in screen.raw, screen.raw[-2000:]
        lines = screen.lines()
        assert not any(" ranks | " in line for line in lines), lines  # erased at the end
        for rank in (0, 1):
            assert [int(x.rsplit(" ", 1)[1]) for x in lines if f"rank {rank} step " in x] == list(range(1, 26)), lines
        assert "\x1b[2K" not in out1 + err1 and " ranks | " not in out1 + err1
    finally:
        for proc in (coordinator, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        screen.close()
