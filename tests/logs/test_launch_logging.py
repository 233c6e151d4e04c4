"""Real launches (trivial non-torch ranks): the spec reaches every rank and shapes its output; bad specs are
refused in-process (tests/plans.py) and once by the real CLI."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli
from tests.plans import cli_error, invoke

EMIT = str(SCRIPTS / "emit.py")
BASE = ["--nproc-per-node", "2", "--master-port", "0"]
CLEAN = {
    "DSLAUNCH_LOG_LEVEL": "",
    "DSLAUNCH_LOG_RANKS": "",
    "DSLAUNCH_LOG_FORMAT": "",
    "NO_COLOR": "",
    "FORCE_COLOR": "",
}


def launch(*args: str, env: dict[str, str] | None = None, nproc: int = 2) -> tuple[str, str]:
    proc = run_cli(
        ["--nproc-per-node", str(nproc), "--master-port", "0", *args, EMIT], timeout=60, env={**CLEAN, **(env or {})}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("emit-done") == nproc, proc.stdout
    return proc.stdout, proc.stderr


def records(err: str, event: str) -> list[str]:
    return [line for line in err.splitlines() if f" {event}" in line or f'"{event}"' in line]


@pytest.mark.launch
def test_default_shows_warnings_only_from_every_rank() -> None:
    _, err = launch()
    assert len(records(err, "user-warning")) == 2
    assert len(records(err, "user-exception")) == 2
    assert not records(err, "user-info") and not records(err, "user-debug")
    assert not records(err, "collective") and not records(err, "wall clock breakdown")
    line = records(err, "user-warning")[0]
    assert re.search(r"\[rank(\d)\]: \d\d:\d\d:\d\d\.\d{3} W \[[^:\]]+:\1\] user: user-warning rank_seen=\1", line), (
        line
    )


@pytest.mark.launch
def test_user_info_shows_info_on_rank_zero_by_default() -> None:
    _, err = launch("--log-level", "user=info")
    info = records(err, "user-info")
    assert len(info) == 1 and info[0].startswith("[rank0]: ")
    assert not records(err, "user-debug")


@pytest.mark.launch
def test_log_ranks_all_shows_every_rank() -> None:
    _, err = launch("--log-level", "info", "--log-ranks", "all")
    assert sorted(line[:8] for line in records(err, "user-info")) == ["[rank0]:", "[rank1]:"]


@pytest.mark.launch
def test_comm_debug_shows_each_collective_and_the_summary() -> None:
    _, err = launch("--log-level", "comm=debug", "--log-ranks", "0-1")
    coll = records(err, "collective")
    assert len(coll) == 2
    assert all("op=all_reduce" in c and "bytes=4096" in c and "dim=dp" in c and "group_size=2" in c for c in coll)
    assert len(records(err, "comm summary")) == 2
    assert not records(err, "user-info")


@pytest.mark.launch
def test_timers_print_at_the_default_level_and_off_silences_them(tmp_path: Path) -> None:
    _, err = launch("--wall-clock-breakdown")
    timers = records(err, "wall clock breakdown")
    assert len(timers) == 1 and "step=7" in timers[0] and "fwd_ms=250" in timers[0] and "bwd_ms=500" in timers[0]
    _, err = launch("--wall-clock-breakdown", "--log-level", "timers=off", nproc=1)
    assert not records(err, "wall clock breakdown")
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"wall_clock_breakdown": True, "comms_logger": {"enabled": True}}))
    _, err = launch("--config", str(config))
    assert len(records(err, "wall clock breakdown")) == 1
    assert len(records(err, "comm summary")) == 1  # rank 0 only: the summary is info


@pytest.mark.launch
def test_json_console_and_per_rank_files(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    _, err = launch("--log-format", "json", "--log-dir", str(log_dir), "--log-level", "debug", "--run-id", "logtest1")
    console = [json.loads(line.split("]: ", 1)[1]) for line in err.splitlines() if "]: {" in line]
    assert {r["rank"] for r in console if r["level"] == "debug"} == {0}
    for rank in (0, 1):
        lines = (log_dir / f"rank{rank}.jsonl").read_text().splitlines()
        recs = [json.loads(line) for line in lines]
        by_event = {r["event"]: r for r in recs}
        assert {"user-debug", "user-info", "user-warning", "collective"} <= set(by_event)
        rec = by_event["user-info"]
        assert list(rec)[:11] == [
            "ts",
            "level",
            "logger",
            "event",
            "rank",
            "local_rank",
            "node_rank",
            "world_size",
            "host",
            "pid",
            "run_id",
        ]
        assert (rec["rank"], rec["local_rank"], rec["node_rank"], rec["world_size"]) == (rank, rank, 0, 2)
        assert rec["run_id"] == "logtest1" and rec["host"] == "localhost" and rec["logger"] == "user"
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", rec["ts"])
        exc = by_event["user-exception"]
        assert exc["level"] == "error" and exc["step"] == 3
        assert exc["exception"][0]["exc_type"] == "KeyError"
        assert exc["exception"][0]["frames"][-1]["filename"].endswith("emit.py")
    assert (log_dir / "launcher.jsonl").exists()


@pytest.mark.launch
def test_colour_follows_force_and_no_color() -> None:
    _, err = launch(env={"FORCE_COLOR": "1"}, nproc=1)
    assert "\x1b[33mW\x1b[0m" in records(err, "user-warning")[0]
    _, err = launch(env={"FORCE_COLOR": "1", "NO_COLOR": "1"}, nproc=1)
    assert "\x1b[" not in err


@pytest.mark.launch
def test_users_root_logging_is_left_alone() -> None:
    proc = run_cli([*BASE, "--log-level", "info", EMIT, "--basic-config"], timeout=60, env=CLEAN)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("ROOT user-root-info") == 2


@pytest.mark.launch
def test_environment_spec_reaches_ranks_and_cli_wins() -> None:
    _, err = launch(env={"DSLAUNCH_LOG_LEVEL": "user=info"}, nproc=1)
    assert len(records(err, "user-info")) == 1
    _, err = launch("--log-level", "user=error", env={"DSLAUNCH_LOG_LEVEL": "user=info"}, nproc=1)
    assert not records(err, "user-info") and not records(err, "user-warning")


@pytest.mark.launch
def test_launcher_records_show_hosts_and_commands() -> None:
    _, err = launch("--log-level", "launcher=info,runner=debug")
    assert "nodes=['localhost:0,1']" in records(err, "hosts chosen")[0]
    assert "node agent 0 (localhost)" in records(err, "command")[0]
    assert "DSLAUNCH_LOG_LEVEL" in records(err, "rank environment")[0]


@pytest.mark.launch
def test_agent_and_teardown_records(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("import os, sys, time\nif os.environ['RANK'] == '1':\n    sys.exit(3)\ntime.sleep(30)\n")
    proc = run_cli([*BASE, "--log-level", "launcher=info,agent=debug", str(script)], timeout=60, env=CLEAN)
    assert proc.returncode == 3
    started = records(proc.stderr, "rank started")
    assert sorted(re.search(r" rank=(\d)", line).group(1) for line in started) == ["0", "1"]  # type: ignore[union-attr]
    assert all(":agent0] agent:" in line and "dslaunch.bootstrap" in line for line in started)
    assert "reason='rank 1 on localhost failed'" in records(proc.stderr, "teardown")[0]
    assert "signal=SIGTERM" in records(proc.stderr, "stopping ranks")[0]


def test_launcher_records_mask_secrets(capsys: pytest.CaptureFixture[str]) -> None:
    from dslaunch.cli.log_options import log_launch
    from dslaunch.logs import _core

    saved = _core.state().spec
    _core.configure("runner=debug", role="launcher")
    try:
        log_launch(
            "ssh",
            ["ssh host 'MY_API_KEY=k-111 DB_PASSWORD=p-222 run' --flag tok-333"],
            [
                ("HF_TOKEN", "t-444"),
                ("AWS_SECRET_ACCESS_KEY", "a-555"),
                ("GH_CREDENTIALS", "c-666"),
                ("SSH_KEY", "k-777"),
                ("PLAIN", "visible-888"),
            ],
            {"tok-333"},
        )
    finally:
        _core.configure(saved, role="process")
    err = capsys.readouterr().err
    for secret in ("k-111", "p-222", "tok-333", "t-444", "a-555", "c-666", "k-777"):
        assert secret not in err
    assert "visible-888" in err and "****" in err


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--log-level", "com=debug"], ["unknown module 'com'", "did you mean 'comm'"]),
        (["--log-level", "comm=loud"], ["unknown level 'loud'", "debug, info, warning, error, critical, off"]),
        (["--log-level", "debug,,comm=info"], ["empty item #2"]),
        (["--log-level", "comm=debug,comm=info"], ["module 'comm' set twice"]),
        (["--log-ranks", "1-x"], ["bad rank item"]),
    ],
)
def test_bad_input_exits_2_before_anything_starts(args: list[str], needles: list[str], tmp_path: Path) -> None:
    marker = tmp_path / "started"
    script = tmp_path / "s.py"
    script.write_text(f"open({str(marker)!r}, 'w')\n")
    code, err = cli_error([*args, str(script)], env=CLEAN)
    assert code == 2
    for needle in needles:
        assert needle in err
    assert not marker.exists()


@pytest.mark.launch
def test_bad_env_spec_exits_2() -> None:
    proc = run_cli([EMIT], timeout=30, env={**CLEAN, "DSLAUNCH_LOG_LEVEL": "comm=shout"})
    assert proc.returncode == 2 and "DSLAUNCH_LOG_LEVEL" in proc.stderr and "Traceback" not in proc.stderr


def test_help_lists_modules_without_a_script() -> None:
    result = invoke(["--log-level", "help"], env=CLEAN)
    assert result.exit_code == 0, result.output
    for module in ("launcher", "comm", "timers", "torch", "py:NAME"):
        assert module in result.stdout


@pytest.mark.launch
def test_rank_rejects_a_hand_set_bad_spec() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "dslaunch.bootstrap", EMIT],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "DSLAUNCH_LOG_LEVEL": "comm=shout"},
    )
    assert proc.returncode == 2 and "DSLAUNCH_LOG_LEVEL" in proc.stderr and "emit-done" not in proc.stdout


@pytest.mark.launch
def test_forked_child_neither_duplicates_nor_breaks_file_lines(tmp_path: Path) -> None:
    script = tmp_path / "fork.py"
    script.write_text(
        "import os\nfrom dslaunch.logs import get_logger\nlog = get_logger('user')\n"
        "for i in range(50):\n    log.info('parent', i=i)\n"
        "pid = os.fork()\nif pid == 0:\n    log.info('child')\n    os._exit(0)\n"
        "os.waitpid(pid, 0)\nlog.info('parent-after')\n"
    )
    proc = run_cli(
        ["--master-port", "0", "--log-dir", str(tmp_path / "logs"), "--log-level", "info", str(script)],
        timeout=60,
        env=CLEAN,
    )
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(line) for line in (tmp_path / "logs" / "rank0.jsonl").read_text().splitlines()]
    events = [r["event"] for r in recs]
    assert events.count("parent") == 50 and events.count("child") == 1 and events.count("parent-after") == 1
    child = next(r for r in recs if r["event"] == "child")
    assert child["pid"] != recs[0]["pid"] and child["rank"] == 0


@pytest.mark.launch
def test_rank_without_the_bootstrap_still_logs_as_a_rank(tmp_path: Path) -> None:
    import sys

    exe = tmp_path / "np.py"
    exe.write_text(
        f"#!{sys.executable}\nfrom dslaunch.logs import get_logger\n"
        "get_logger('user').info('np-info')\nget_logger('user').warning('np-warn')\n"
    )
    exe.chmod(0o755)
    proc = run_cli([*BASE, "--no-python", "--log-level", "user=info", str(exe)], timeout=60, env=CLEAN)
    assert proc.returncode == 0, proc.stderr
    assert [line[:8] for line in records(proc.stderr, "np-info")] == ["[rank0]:"]
    assert sorted(
        re.search(r"\[localhost:(\d)\]", line).group(1)  # type: ignore[union-attr]
        for line in records(proc.stderr, "np-warn")
    ) == ["0", "1"]


@pytest.mark.launch
def test_two_node_plan_spec_reaches_node_one(tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=1\n127.0.0.1 slots=1\n")
    log_dir = tmp_path / "logs"
    proc = run_cli(
        [
            "-H",
            str(hostfile),
            "--launcher",
            "local",
            "--master-port",
            "0",
            "--log-level",
            "user=info,agent=debug",
            "--log-ranks",
            "1",
            "--log-dir",
            str(log_dir),
            EMIT,
        ],
        timeout=60,
        env=CLEAN,
    )
    assert proc.returncode == 0, proc.stderr
    info = records(proc.stderr, "user-info")
    assert len(info) == 1 and info[0].startswith("[127.0.0.1:rank1]: ") and "[127.0.0.1:1] user:" in info[0]
    rec = next(json.loads(line) for line in (log_dir / "rank1.jsonl").read_text().splitlines() if '"user-info"' in line)
    assert (rec["host"], rec["node_rank"], rec["rank"], rec["local_rank"]) == ("127.0.0.1", 1, 1, 0)
    agent = [json.loads(line) for line in (log_dir / "agent1.jsonl").read_text().splitlines()]
    assert agent[0]["event"] == "rank started" and agent[0]["host"] == "127.0.0.1" and agent[0]["node_rank"] == 1
