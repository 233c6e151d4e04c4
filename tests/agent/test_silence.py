"""An agent of the ssh runner takes its launcher as gone when its control channel goes silent (a partition sends no
EOF): it stops its ranks and ends within ``wire.silence_bound``, during an attempt and between attempts; heartbeats
keep it (real agent processes, their stdin the control channel)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from dslaunch import wire
from dslaunch.plan import RemoteSettings
from tests.helpers import SCRIPTS, job_processes, wait_for_file
from tests.plans import make_plan

pytestmark = pytest.mark.launch

CONNECT_TIMEOUT = 1.0  # so the bound is 3 s


def _agent(tmp_path: Path, run_id: str, *, for_job: bool) -> tuple[subprocess.Popen[bytes], bytes]:
    plan = make_plan(
        hosts=("localhost",),
        run_id=run_id,
        target=str(SCRIPTS / "job.py"),
        args=("sleep", str(tmp_path)),
        python=sys.executable,
        remote=RemoteSettings(connect_timeout=CONNECT_TIMEOUT),
        shutdown_timeout=2,
    )
    assert wire.silence_bound(plan) == CONNECT_TIMEOUT + 2
    role = ["--for-job"] if for_job else ["--node-rank", "0"]
    env = {**os.environ, "DSLAUNCH_RUN_ID": run_id}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dslaunch.agent", *role], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, env=env, cwd=tmp_path,
    )  # fmt: skip
    first = wire.job_run(0, plan) if for_job else (wire.plan_to_b64(plan) + "\n").encode()
    return proc, first


def _beat(proc: subprocess.Popen[bytes], seconds: float) -> None:
    assert proc.stdin is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        proc.stdin.write(wire.control_heartbeat())
        proc.stdin.flush()
        time.sleep(0.5)


@pytest.mark.parametrize(
    ("for_job", "when", "said"),
    [
        (False, "attempt", "taking it as gone"),
        (True, "attempt", "taking it as gone"),
        (True, "between attempts", "ending"),  # the attempt stopped: the agent waits for the next one
    ],
)
def test_a_silent_launcher_is_taken_as_gone_within_the_bound(
    tmp_path: Path, for_job: bool, when: str, said: str
) -> None:
    run_id = "silent-" + uuid.uuid4().hex[:8]
    proc, first = _agent(tmp_path, run_id, for_job=for_job)
    assert proc.stdin is not None
    try:
        proc.stdin.write(first)
        proc.stdin.flush()
        assert wait_for_file(str(tmp_path / "ready.0"), 30), "the rank did not start"
        if when == "between attempts":
            proc.stdin.write(wire.control_stop())
            proc.stdin.flush()
        _beat(proc, 5)  # longer than the bound: heartbeats keep it
        assert proc.poll() is None, "it ended while heartbeats came"
        silent_at = time.monotonic()  # stdin stays open: no EOF, only silence
        proc.wait(timeout=CONNECT_TIMEOUT + 2 + 2 + 5)
        took = time.monotonic() - silent_at
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdin.close()
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    assert f"nothing from the launcher for 3 s: {said}" in err, err
    assert took < CONNECT_TIMEOUT + 2 + 2 + 2, f"ended {took:.1f} s after the last heartbeat"
    assert [p.pid for p in job_processes(run_id)] == []
