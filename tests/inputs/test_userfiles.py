"""Every file dslaunch reads from the user is read with a cap, and nothing it reads can hang it (issue 22,
item 7): ``--hostfile /dev/zero`` ended in a MemoryError traceback, and a FIFO nobody writes would block the
launcher for ever. Each refusal is one line, exit 2, naming the file (and the cap, for a file too big).

The endless cases run in a subprocess with a 1 GiB address-space limit, so a regression fails fast instead of
taking the machine's memory.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import threading
import time
from pathlib import Path

import pytest

from dslaunch.inputs import userfiles
from tests.helpers import DSLAUNCH
from tests.plans import cli_error

LIMIT = 1 << 30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _run(args: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DSLAUNCH, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        preexec_fn=_limited,
    )


ENDLESS: dict[str, tuple[list[str], dict[str, str], str]] = {
    "hostfile": (["--hostfile", "/dev/zero"], {}, "hostfile '/dev/zero' is a device"),
    "env-file": (["--env-file", "/dev/zero"], {}, "env file '/dev/zero' is a device"),
    "config": (["--config", "/dev/zero"], {}, "config '/dev/zero' is a device"),
    "deepspeed_env": (["-H", "{dir}/remote"], {"DS_ENV_FILE": "/dev/urandom"}, "env file '/dev/urandom' is a device"),
    "ssh-config": (["-H", "{dir}/remote", "--ssh-config", "/dev/zero"], {}, "ssh config '/dev/zero' is a device"),
}


@pytest.mark.launch
@pytest.mark.parametrize("case", sorted(ENDLESS))
def test_an_endless_file_is_refused_unread(case: str, tmp_path: Path) -> None:
    (tmp_path / "remote").write_text("node1 slots=1\nnode2 slots=1\n")
    args, env, needle = ENDLESS[case]
    done = _run([*(a.replace("{dir}", str(tmp_path)) for a in args), "--dry-run", "x.py"], env)
    assert done.returncode == 2 and needle in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()[-1]) < 300


@pytest.mark.launch
def test_a_report_dir_with_endless_and_blocking_files_is_read_around_them(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    record = {"event": "phase", "phase": "spawned", "t": 1.0, "rank": 0, "host": "h", "run_id": "r", "attempt": 0}
    (logs / "agent0.jsonl").write_text("x" * (userfiles.MAX_LINE + 10) + "\n" + json.dumps(record) + "\n")
    (logs / "zero.jsonl").symlink_to("/dev/zero")
    os.mkfifo(logs / "fifo.jsonl")
    done = _run(["--report", str(logs)], timeout=30)
    assert done.returncode == 0 and "timeline:" in done.stdout, done.stderr


@pytest.mark.launch
def test_a_fifo_nobody_writes_reads_as_empty_and_a_silent_writer_is_given_up(tmp_path: Path) -> None:
    fifo = tmp_path / "hosts"
    os.mkfifo(fifo)
    started = time.monotonic()
    done = _run(["--hostfile", str(fifo), "--dry-run", "x.py"], timeout=30)
    assert done.returncode == 2 and str(fifo) in done.stderr and "no hosts" in done.stderr, done.stderr
    assert time.monotonic() - started < userfiles.PIPE_WAIT_S  # no writer: its end, at once
    writer = os.open(fifo, os.O_RDWR)  # holds the FIFO open for writing and sends nothing
    try:
        started = time.monotonic()
        done = _run(["--hostfile", str(fifo), "--dry-run", "x.py"], timeout=60)
        took = time.monotonic() - started
    finally:
        os.close(writer)
    assert done.returncode == 2 and f"is a pipe that sent nothing for {userfiles.PIPE_WAIT_S:g} s" in done.stderr
    assert userfiles.PIPE_WAIT_S <= took < userfiles.PIPE_WAIT_S + 20


def test_a_file_over_the_cap_is_refused_naming_the_cap(tmp_path: Path) -> None:
    big = tmp_path / "hosts"
    with big.open("wb") as f:
        f.truncate(userfiles.MAX_BYTES + 1)
    code, err = cli_error(["--hostfile", str(big), "--dry-run", "x.py"])
    assert code == 2 and f"hostfile '{big}' is larger than 16 MiB, the most dslaunch reads" in err, err


@pytest.mark.parametrize("option", ["--hostfile", "--env-file", "--config"])
def test_a_directory_is_refused(option: str, tmp_path: Path) -> None:
    code, err = cli_error([option, str(tmp_path), "--dry-run", "x.py"])
    assert code == 2 and str(tmp_path) in err and "is a directory" in err, err  # --config: click's own check


def test_a_pipe_with_a_writer_is_read_to_its_end(tmp_path: Path) -> None:
    read, write = os.pipe()
    feeder = threading.Thread(target=lambda: (os.write(write, b"a slots=2\n"), time.sleep(0.2), os.close(write)))
    feeder.start()
    try:
        assert userfiles.read_text(f"/dev/fd/{read}", "hostfile") == "a slots=2\n"
    finally:
        feeder.join()
        os.close(read)


@pytest.mark.parametrize(
    ("data", "cap", "ok"), [(b"", 0, True), (b"abc", 3, True), (b"abcd", 3, False), (b"\xff", 9, False)]
)
def test_read_text_table(tmp_path: Path, data: bytes, cap: int, ok: bool) -> None:
    path = tmp_path / "f"
    path.write_bytes(data)
    if ok:
        assert userfiles.read_text(str(path), "file", cap=cap) == data.decode()
    else:
        with pytest.raises(userfiles.UserFileError, match=r"larger than 3 bytes|not UTF-8 text"):
            userfiles.read_text(str(path), "file", cap=cap)


@pytest.mark.parametrize(
    ("text", "max_line", "lines"),
    [
        ("a\nb\n", 5, ["a\n", "b\n"]),
        ("a\n" + "x" * 9 + "\nb", 5, ["a\n", "b"]),  # the long line is skipped whole, the last kept without \n
        ("xxxxx\n", 5, ["xxxxx\n"]),  # the limit does not count the newline
        ("xxxxxx\nb\n", 5, ["b\n"]),
        ("xxxx\n" + "y" * 20, 5, ["xxxx\n"]),
    ],
)
def test_regular_lines_table(tmp_path: Path, text: str, max_line: int, lines: list[str]) -> None:
    (tmp_path / "f").write_text(text)
    assert list(userfiles.regular_lines(str(tmp_path / "f"), max_line=max_line)) == lines
    assert list(userfiles.regular_lines(str(tmp_path / "missing"))) == []
