"""--max-restarts on this machine: a failed attempt is torn down and started again, a signal never is."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import DSLAUNCH, SCRIPTS, run_cli, wait_for_file, wait_until_gone
from tests.plans import cli_error, plan_of

FLAKY = str(SCRIPTS / "flaky.py")
REPEAT_FAIL = str(SCRIPTS / "repeat_fail.py")


def _attempts(folder: Path) -> list[tuple[int, int, int]]:
    lines = (folder / "attempts.txt").read_text().split("\n")
    return sorted(tuple(int(x) for x in line.split()) for line in lines if line)  # type: ignore[misc]


@pytest.mark.launch
def test_fails_on_the_first_attempt_and_succeeds_on_the_second(tmp_path: Path) -> None:
    res = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "1", "--restart-delay", "0.2",
         FLAKY, str(tmp_path), "1", "1", "7"]
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    seen = _attempts(tmp_path)  # rank 0 may be stopped in attempt 0 before it writes
    assert (0, 1, 1) in seen and [a for a in seen if a[0] == 1] == [(1, 0, 1), (1, 1, 1)]
    assert {a for a, _r, _m in seen} == {0, 1}
    assert (
        "attempt 1 of 2 failed (rank 1 on localhost exited with code 7); restarting every rank in 0.2 s" in res.stderr
    )
    assert "the job ran 2 times (--max-restarts 1)" in res.stderr
    assert "attempt 2: exit 0: succeeded" in res.stderr


@pytest.mark.launch
@pytest.mark.parametrize("restarts", [0, 2])
def test_always_failing_exits_with_its_code_after_n_plus_one_attempts(tmp_path: Path, restarts: int) -> None:
    res = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--max-restarts", str(restarts), "--restart-delay", "0",
         FLAKY, str(tmp_path), "0", "99", "5", "30"]
    )  # fmt: skip
    assert res.returncode == 5, res.stderr
    assert sorted({a for a, _r, _m in _attempts(tmp_path)}) == list(range(restarts + 1))
    assert res.stderr.count("rank 0 (local_rank 0, node 0) on host localhost exited with code 5") == restarts + 1
    if restarts:
        summary = res.stderr[res.stderr.index("the job ran") :]
        assert summary.count("exit 5: rank 0 on localhost exited with code 5") == restarts + 1
    else:
        assert "attempt" not in res.stderr  # no restarts: the usual summary only


def _repeat_fail(tmp_path: Path, restarts: int, mode: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--max-restarts", str(restarts), "--restart-delay", "0",
         *extra, REPEAT_FAIL, str(tmp_path), mode, "7" if mode != "exit" or not extra else "3"]
    )  # fmt: skip


@pytest.mark.launch
def test_the_same_import_error_twice_before_a_step_is_not_restarted_again(tmp_path: Path) -> None:
    res = _repeat_fail(tmp_path, 5, "import")
    assert res.returncode == 1, res.stderr
    assert sorted({a for a, _r in _attempts2(tmp_path)}) == [0, 1]
    assert (
        "dslaunch: not restarting: rank 1 on localhost failed the same way in attempts 1 and 2, within 300 s of "
        "their start (--repeat-window), before any rank reached a step (ModuleNotFoundError: No module named "
        "'dslaunch_repeat_fail_no_such_module'); another attempt would fail the same way" in res.stderr
    )
    assert "the job ran 2 times (--max-restarts 5)" in res.stderr


@pytest.mark.launch
def test_the_same_exit_code_twice_before_a_step_is_not_restarted_again(tmp_path: Path) -> None:
    res = _repeat_fail(tmp_path, 5, "exit")
    assert res.returncode == 7, res.stderr
    assert sorted({a for a, _r in _attempts2(tmp_path)}) == [0, 1]
    assert (
        "in attempts 1 and 2, within 300 s of their start (--repeat-window), before any rank reached a step "
        "(exit code 7)" in res.stderr
    )


@pytest.mark.launch
def test_a_no_restart_on_code_ends_the_job_at_once(tmp_path: Path) -> None:
    res = _repeat_fail(tmp_path, 5, "exit", "--no-restart-on", "4,3")
    assert res.returncode == 3, res.stderr
    assert sorted({a for a, _r in _attempts2(tmp_path)}) == [0]
    assert "dslaunch: not restarting: rank 1 on localhost exited with code 3, which --no-restart-on lists" in res.stderr
    assert "restarting every rank" not in res.stderr


@pytest.mark.launch
@pytest.mark.parametrize("mode", ["flaky", "stepped"])
def test_a_failure_that_differs_or_comes_after_a_step_gets_every_restart(tmp_path: Path, mode: str) -> None:
    """A different message each attempt, or the same exit after a progress beat: every restart, and the last
    attempt (which the script lets pass) ends the job 0."""
    res = _repeat_fail(tmp_path, 3, mode)
    assert res.returncode == 0, res.stderr
    assert sorted({a for a, _r in _attempts2(tmp_path)}) == [0, 1, 2, 3]
    assert "not restarting" not in res.stderr
    assert "the job ran 4 times (--max-restarts 3)" in res.stderr
    if mode == "flaky":
        assert all(f"RuntimeError: flaky failure number {n}" in res.stderr for n in range(3)), res.stderr


LATE_ERROR = "RuntimeError: NCCL watchdog: collective timed out"


def _plain(tmp_path: Path, window: str, mode: str, given: str) -> subprocess.CompletedProcess[str]:
    """A script written for torchrun (no engine, no heartbeat: no progress beat), --max-restarts 2."""
    return run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "2", "--restart-delay", "0",
         "--repeat-window", window, REPEAT_FAIL, str(tmp_path), mode, given]
    )  # fmt: skip


@pytest.mark.launch
@pytest.mark.parametrize(("window", "mode", "given"), [("0.5", "late", "2"), ("0", "import", "1")])
def test_a_plain_script_failing_the_same_way_past_the_repeat_window_gets_every_restart(
    tmp_path: Path, window: str, mode: str, given: str
) -> None:
    """Rank 1 fails the same way in every attempt, 2 s in, past a --repeat-window of 0.5 s (hours into training,
    as far as the rule can tell): every restart, and the last attempt (which the script lets pass) ends 0. A
    window of 0 turns the rule off: the same import error at once gets every restart too."""
    res = _plain(tmp_path, window, mode, given)
    assert res.returncode == 0, res.stderr
    assert sorted({a for a, _r in _attempts2(tmp_path)}) == [0, 1, 2]
    assert "not restarting" not in res.stderr
    assert "the job ran 3 times (--max-restarts 2)" in res.stderr
    if mode == "late":
        assert res.stderr.count(LATE_ERROR) >= 2, res.stderr


@pytest.mark.launch
def test_a_plain_script_failing_the_same_way_within_the_repeat_window_is_stopped_after_the_second(
    tmp_path: Path,
) -> None:
    """The same script and failure, 2 s in, within a --repeat-window of 60 s: the job ends after attempt 2."""
    res = _plain(tmp_path, "60", "late", "2")
    assert res.returncode == 1, res.stderr
    assert sorted({a for a, _r in _attempts2(tmp_path)}) == [0, 1]
    assert (
        "dslaunch: not restarting: rank 1 on localhost failed the same way in attempts 1 and 2, within 60 s of their "
        f"start (--repeat-window), before any rank reached a step ({LATE_ERROR}); another attempt would fail the "
        "same way" in res.stderr
    )
    assert "the job ran 2 times (--max-restarts 2)" in res.stderr


def _attempts2(folder: Path) -> set[tuple[int, int]]:
    lines = (folder / "attempts.txt").read_text().split("\n")
    return {(int(line.split()[0]), int(line.split()[1])) for line in lines if line}


@pytest.mark.launch
def test_a_lost_node_agent_is_restarted(tmp_path: Path) -> None:
    """Two local nodes; node 1's agent is SIGKILLed in the first attempt: the job is started again and ends 0."""
    rid = f"lost{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [*DSLAUNCH, "--hostfile", str(_two_nodes(tmp_path)), "--launcher", "local", "--master-port", "0",
         "--run-id", rid, "--max-restarts", "1", "--restart-delay", "0", FLAKY, str(tmp_path), "-1", "0", "0", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert wait_for_file(str(tmp_path / "attempts.txt"), 20)
        agent = _agent_of_node(proc.pid, 1)
        agent.kill()
        _out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "node 1 (127.0.0.2) disappeared" in err and "the job ran 2 times" in err
    assert wait_until_gone(rid, 5) == []


def _two_nodes(tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    return hosts


def _agent_of_node(launcher: int, node_rank: int):  # type: ignore[no-untyped-def]
    import psutil

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for child in psutil.Process(launcher).children():
            for rank in child.children():
                if rank.environ().get("NODE_RANK") == str(node_rank):
                    return child
        time.sleep(0.05)
    raise AssertionError(f"no agent for node {node_rank}")


@pytest.mark.launch
@pytest.mark.parametrize(
    ("sig", "code", "extra"),
    [
        (signal.SIGTERM, 143, []),
        (signal.SIGINT, 130, []),
        (signal.SIGUSR1, 138, ["--stop-on-signal", "USR1"]),
        (signal.SIGTERM, 75, ["--stop-exit-code", "75"]),
    ],
)
def test_a_signal_during_the_restart_delay_ends_at_once(tmp_path: Path, sig: int, code: int, extra: list[str]) -> None:
    log = tmp_path / "stderr.txt"
    with log.open("w") as err_file:
        proc = subprocess.Popen(
            [*DSLAUNCH, "--nproc-per-node", "1", "--master-port", "0", "--max-restarts", "3", "--restart-delay",
             "60", *extra, FLAKY, str(tmp_path), "0", "9", "3"],
            stdout=subprocess.DEVNULL, stderr=err_file, text=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while "restarting every rank in 60 s" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=10)
        took = time.monotonic() - sent
    finally:
        proc.kill()
    err = log.read_text()
    assert proc.returncode == code, err
    assert took < 2.0, f"took {took:.1f} s"
    assert f"received {signal.Signals(sig).name} while waiting to restart; not restarting" in err
    assert len(_attempts(tmp_path)) == 1


@pytest.mark.launch
def test_a_signal_during_an_attempt_is_never_restarted(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*DSLAUNCH, "--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "3", "--restart-delay", "0",
         FLAKY, str(tmp_path), "-1", "0", "0", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert wait_for_file(str(tmp_path / "attempts.txt"), 20)
        while len(_attempts(tmp_path)) < 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert {a for a, _r, _m in _attempts(tmp_path)} == {0}
    assert "restarting" not in err


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--max-restarts", "-1"], "--max-restarts"),
        (["--max-restarts", "x"], "--max-restarts"),
        (["--max-restarts", "10001"], "--max-restarts"),
        (["--restart-delay", "nan"], "--restart-delay"),
        (["--restart-delay", "-2"], "--restart-delay"),
        (["--no-restart-on", "0"], "'0' in '0' is not an exit code: give whole numbers 1-255"),
        (["--no-restart-on", "3,256"], "'256' in '3,256' is not an exit code"),
        (["--no-restart-on", "3,,4"], "'' in '3,,4' is not an exit code"),
        (["--no-restart-on", "-3"], "--no-restart-on"),
        (["--no-restart-on", "٣"], "is not an exit code"),
        (["--repeat-window", "-1"], "Invalid value for '--repeat-window': '-1' is not a number of seconds"),
        (["--repeat-window", "five"], "'five' is not a number of seconds, e.g. 5 or 0.5"),
        (["--repeat-window", "nan"], "--repeat-window"),
        (["--repeat-window", "604801"], "604801 is not in the range 0<=x<=604800"),
    ],
)
def test_bad_restart_values_exit_2(args: list[str], words: str) -> None:
    code, err = cli_error([*args, FLAKY])
    assert code == 2 and words in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(("given", "codes"), [("3", (3,)), (" 4, 3,3 ", (3, 4)), ("", ()), ("255,1", (1, 255))])
def test_no_restart_on_reaches_the_plan(given: str, codes: tuple[int, ...]) -> None:
    assert plan_of(["--no-restart-on", given, FLAKY]).no_restart_on == codes
    assert plan_of([FLAKY], env={"DSLAUNCH_NO_RESTART_ON": given}).no_restart_on == codes


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="0123456789.-e+nainf _x", max_size=8))
def test_any_repeat_window_value_is_seconds_or_a_usage_error(value: str) -> None:
    try:
        window = plan_of(["--repeat-window", value, FLAKY]).restarts.repeat_window
    except click.ClickException as exc:
        assert exc.exit_code == 2 and "--repeat-window" in exc.format_message(), exc.format_message()
    else:
        assert 0 <= window <= 7 * 86400 and window == float(value)


@pytest.mark.parametrize(
    ("args", "env", "window"),
    [([], {}, 300.0), (["--repeat-window", "1.5"], {}, 1.5), ([], {"DSLAUNCH_REPEAT_WINDOW": "0"}, 0.0)],
)
def test_repeat_window_reaches_the_plan(args: list[str], env: dict[str, str], window: float) -> None:
    plan = plan_of([*args, FLAKY], env=env)
    assert plan.restarts.repeat_window == window
    assert plan.summary().get("repeat_window") == (None if window == 300.0 else window)  # --dry-run: when not 300
