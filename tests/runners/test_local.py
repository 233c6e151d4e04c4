"""Real local launches: rank environment, byte-exact arguments, output, failures, signals, orphans."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.helpers import DSLAUNCH, SCRIPTS, alive, job_processes, run_cli, wait_for_file, wait_until_gone

pytestmark = pytest.mark.launch


# DeepSpeed's tests/unit/launcher/test_user_args.py prompts, plus shell metacharacters and non-ASCII.
PAYLOADS = [
    'I\'m going to tell them "DeepSpeed is the best"',
    "'I am 72\" tall'",
    '"I am 6\' tall"',
    "'\"translate English to Romanian: \"'",
    "$(touch pwned)",
    "`touch pwned2`",
    "a; touch pwned3",
    "back\\slash \\n not a newline",
    "real\nnewline",
    "spaces   and\ttabs",
    "ünïcödé ✓ 日本",
    "",
    "--not-an-option-for-dslaunch",
    "-H",
]


def run_id() -> str:
    return "t" + uuid.uuid4().hex[:10]


def test_ranks_get_their_environment_and_exact_arguments(tmp_path: Path) -> None:
    rid = run_id()
    result = run_cli(
        ["--nproc-per-node", "4", "--run-id", rid, str(SCRIPTS / "touch_env.py"), *PAYLOADS],
        env={"OUT_DIR": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""},
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    for rank in range(4):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert record["argv"] == PAYLOADS
        assert record["name"] == "__main__"
        assert record["path0"] == str(SCRIPTS)
        assert record["argv0"] == str(SCRIPTS / "touch_env.py")
        assert record["env"] == {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "4",
            "NODE_RANK": "0",
            "GROUP_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500",
            "DSLAUNCH_RUN_ID": rid,
            "CROSS_RANK": "0",
            "CROSS_SIZE": "1",
            "LOCAL_SIZE": "4",
            "CUDA_VISIBLE_DEVICES": "0,1,2,3",
        }
        assert f"[rank{rank}]: hello from {rank}" in result.stdout.splitlines()
    assert not list(tmp_path.glob("pwned*")), "an argument was run by a shell"


def test_uneven_nodes_local_rank_is_index_within_node(tmp_path: Path) -> None:
    """Hosts with 3 and 2 slots: LOCAL_RANK counts within the node (DeepSpeed rotates RANK % LOCAL_SIZE)."""
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=3\n127.0.0.1 slots=2\n")
    result = run_cli(
        ["-H", str(hosts), "--launcher", "local", "--master-port", "0", str(SCRIPTS / "touch_env.py")],
        env={"OUT_DIR": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    seen = {r: json.loads((tmp_path / f"rank{r}.json").read_text())["env"] for r in range(5)}
    assert [(seen[r]["LOCAL_RANK"], seen[r]["NODE_RANK"], seen[r]["LOCAL_WORLD_SIZE"]) for r in range(5)] == [
        ("0", "0", "3"),
        ("1", "0", "3"),
        ("2", "0", "3"),
        ("0", "1", "2"),
        ("1", "1", "2"),
    ]
    assert seen[4]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert "[127.0.0.1:rank4]: hello from 4" in result.stdout


def test_module_and_executable(tmp_path: Path) -> None:
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text("import os, sys\nprint('module', __name__, os.environ['RANK'], sys.argv[1:])\n")
    result = run_cli(["--nproc-per-node", "2", "-m", "mypkg.job", "x y"], cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "[rank1]: module __main__ 1 ['x y']" in result.stdout
    result = run_cli(["--nproc-per-node", "2", "--no-python", "/bin/sh", "-c", 'echo "exe $RANK"; exit 0'])
    assert result.returncode == 0, result.stderr
    assert "[rank0]: exe 0" in result.stdout and "[rank1]: exe 1" in result.stdout


def test_partial_last_line_and_stderr_prefixed() -> None:
    result = run_cli(["--no-python", "/bin/sh", "-c", "printf 'no newline'; printf 'to err\\n' >&2"])
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["[rank0]: no newline"]
    assert result.stderr.splitlines() == ["[rank0]: to err"]


@pytest.mark.parametrize(
    ("how", "extra_env", "code", "says"),
    [
        ("exit", {"FAIL_CODE": "3"}, 3, "exited with code 3"),
        ("raise", {}, 1, "ValueError: boom from rank 1"),
        ("signal", {"FAIL_SIGNAL": "SIGKILL"}, 137, "was killed by SIGKILL"),
        ("signal", {"FAIL_SIGNAL": "SIGSEGV"}, 139, "was killed by SIGSEGV"),
    ],
)
def test_first_failure_stops_everyone_and_sets_exit_code(
    tmp_path: Path, how: str, extra_env: dict[str, str], code: int, says: str
) -> None:
    rid = run_id()
    started = time.monotonic()
    result = run_cli(
        ["--nproc-per-node", "3", "--run-id", rid, str(SCRIPTS / "fail_one.py")],
        env={"OUT_DIR": str(tmp_path), "FAIL_HOW": how, **extra_env},
    )
    elapsed = time.monotonic() - started
    assert result.returncode == code, result.stderr
    assert "rank 1 (local_rank 1, node 0) on host localhost" in result.stderr
    assert says in result.stderr
    assert "root cause" in result.stderr
    assert "2 other rank(s) were stopped" in result.stderr
    assert elapsed < 20, "the sleeping ranks (60 s) were not stopped"
    assert not job_processes(rid)


def test_exception_traceback_and_log_dir(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = run_cli(
        ["--nproc-per-node", "2", "--log-dir", str(logs), str(SCRIPTS / "fail_one.py")],
        env={"OUT_DIR": str(tmp_path), "FAIL_HOW": "raise"},
    )
    assert result.returncode == 1
    assert "  | ValueError: boom from rank 1" in result.stderr
    assert "bootstrap" not in result.stderr.split("traceback:")[1], "bootstrap frames leak into the traceback"
    error = json.loads((logs / "rank1.error.json").read_text())
    assert error["exception"] == "ValueError" and "boom from rank 1" in error["traceback"]
    assert "about to fail" in (logs / "rank1.stderr.log").read_text()
    assert (logs / "rank0.stdout.log").exists()


def _start(tmp_path: Path, rid: str, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [*DSLAUNCH, "--nproc-per-node", "2", "--run-id", rid, *extra, str(SCRIPTS / "sleepy.py")],
        env={**os.environ, "OUT_DIR": str(tmp_path), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    for rank in range(2):
        assert wait_for_file(str(tmp_path / f"rank{rank}.pid"), 30), "ranks did not start"
    time.sleep(0.2)
    return proc


def _pids(tmp_path: Path) -> list[int]:
    return [int(p) for rank in range(2) for p in (tmp_path / f"rank{rank}.pid").read_text().split()]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_launcher_tears_down(tmp_path: Path, sig: int, code: int) -> None:
    rid = run_id()
    proc = _start(tmp_path, rid)
    pids = _pids(tmp_path)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == code, err
    assert not wait_until_gone(rid, 5)
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_sigkill_to_launcher_leaves_no_process(tmp_path: Path) -> None:
    rid = run_id()
    proc = _start(tmp_path, rid)
    pids = _pids(tmp_path)
    proc.kill()
    proc.wait()
    left = wait_until_gone(rid, 5)
    assert not left, [p.cmdline() for p in left]
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_ranks_ignoring_sigterm_get_sigkill_after_grace(tmp_path: Path) -> None:
    rid = run_id()
    proc = _start(tmp_path, rid, "--stop-grace", "0.5", "--shutdown-timeout", "1", env={"IGNORE_TERM": "1"})
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == 143
    assert time.monotonic() - started < 6.5
    assert not wait_until_gone(rid, 5)


def test_the_first_rank_to_fail_is_the_root_cause_even_when_it_exits_last(tmp_path: Path) -> None:
    """Rank 1 raises, then sits in an at-exit teardown; rank 0 fails 0.3 s later and is reaped first. The failure
    time the bootstrap records makes rank 1 the root cause, with the code it failed with (1), not SIGTERM's."""
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", str(SCRIPTS / "slow_exit.py"), str(tmp_path)])
    assert result.returncode == 1, result.stderr
    assert "rank 1 (local_rank 1, node 0) on host localhost exited with code 1 [root cause" in result.stderr
    assert "ValueError: boom from rank 1, which fails first" in result.stderr


@pytest.mark.launch
def test_a_daemon_without_the_run_id_goes_when_its_agent_is_killed(tmp_path: Path) -> None:
    """A rank's daemon that left the session and cleared its environment: the sweep cannot find it by run id, but
    the launcher, a child subreaper, adopts it when the agent dies, and ends it (issue 31, item 4)."""
    import psutil

    proc = subprocess.Popen(
        [*DSLAUNCH, "--nproc-per-node", "2", "--master-port", "0", str(SCRIPTS / "bare_daemon.py"), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert all(wait_for_file(str(tmp_path / f"ready.{r}"), 30) for r in range(2)), proc.communicate(timeout=5)
        daemons = [int((tmp_path / f"daemon.{r}").read_text()) for r in range(2)]
        assert all(psutil.pid_exists(pid) for pid in daemons)
        agent = psutil.Process(proc.pid).children()[0]
        agent.kill()
        _out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 137, err
    assert "disappeared" in err, err
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in daemons) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in daemons if alive(pid)], "the daemons outlived their agent"
