"""What the console-collapse launch tests share: a gated launch, and which ranks each console line names.

The ranks (scripts/collapse_rank.sh) wait at a gate, a FIFO the test opens once all are ready, so every rank's
copy comes within the window whatever the start-up skew of 256 processes (or 4 hosts) on a loaded machine; a
real job's ranks print a warning after a collective for the same reason.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from tests.helpers import DSLAUNCH, SCRIPTS

SCRIPT = str(SCRIPTS / "collapse_rank.sh")
SAME = "UserWarning: the same on every rank"


def own(rank: int) -> str:
    return f"UserWarning: rank {rank} has a warning of its own"


def gated_run(
    args: list[str], tmp_path: Path, ranks: int, env: dict[str, str], *, timeout: float = 150
) -> subprocess.CompletedProcess[str]:
    """``dslaunch ARGS --no-python sh SCRIPT`` (ARGS may ``--export``); the gate opens once ``ranks`` wait."""
    ready, gate = tmp_path / "ready", tmp_path / "gate"
    ready.mkdir()
    os.mkfifo(gate)
    command = [*DSLAUNCH, *args, "--export", f"READY_DIR={ready}", "--export", f"GATE={gate}"]
    proc = subprocess.Popen(
        [*command, "--no-python", "sh", SCRIPT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    opener = threading.Thread(target=_open_gate_when_ready, args=(ready, gate, proc, ranks), daemon=True)
    opener.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        proc.wait()
        opener.join(5)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _open_gate_when_ready(ready: Path, gate: Path, proc: subprocess.Popen[str], ranks: int) -> None:
    """Once every rank waits, open the FIFO for writing (every waiting open returns) and keep it open."""
    while len(os.listdir(ready)) < ranks:
        if proc.poll() is not None:
            return
        time.sleep(0.05)
    fd = os.open(gate, os.O_WRONLY)
    try:
        proc.wait()
    finally:
        os.close(fd)


def expand(spec: str) -> list[int]:
    """``0-3,7`` -> [0, 1, 2, 3, 7]."""
    ranks: list[int] = []
    for run in spec.split(","):
        first, _, last = run.partition("-")
        ranks.extend(range(int(first), int(last or first) + 1))
    return ranks


def lines_of(console: str, text: str) -> list[list[int]]:
    """The ranks each console line showing ``text`` names (``[rank1-3]: `` or ``[host:rank5]: ``), in order."""
    found = []
    for line in console.split("\n"):
        prefix, sep, rest = line.partition("]: ")
        if sep and rest == text and prefix.startswith("["):
            found.append(expand(prefix.rpartition("rank")[2]))
    return found


def every_rank_once(lines: list[list[int]], world: int) -> bool:
    return sorted(rank for line in lines for rank in line) == list(range(world))


def check_failure_order(err: str, failing: int, node_ranks: range) -> None:
    """The failing rank's copy is out before the summary and before its node's ranks say they were stopped
    (one agent's stderr keeps its order; other nodes' lines come over other connections)."""
    lines = err.split("\n")
    shown = next(i for i, line in enumerate(lines) if failing in next(iter(lines_of(line, SAME)), []))
    stopping = [i for i, line in enumerate(lines) if line.endswith(" stopping") and _rank_of(line) in node_ranks]
    summary = next(i for i, line in enumerate(lines) if f"rank {failing} " in line and "exited with code 3" in line)
    assert len(stopping) == len(node_ranks) - 1 and shown < min(stopping) and shown < summary, err[-3000:]


def _rank_of(line: str) -> int:
    return int(line.partition("]: ")[0].rpartition("rank")[2])
