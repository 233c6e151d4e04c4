"""A rank that trains in lockstep without torch: each step ends with a barrier of files (every rank's position
file says it reached the step, as an allreduce would), and ``dslaunch.should_stop()`` is called once per step, at
its start. On True the rank writes the step it stopped at to OUT_DIR/saved.RANK and exits 0. After READY_AFTER
steps it writes OUT_DIR/ready.RANK. The ranks listed in NO_CALL (comma-separated) never call should_stop().
NO_BARRIER=1: no barrier, each rank runs at its own pace (RANK_DELAY: seconds added to each step of the ranks in
DELAY_RANKS, comma-separated, rank 0 by default).
IGNORE_TERM=1: the rank ignores SIGTERM (Slurm's scancel signals every process of the step, ranks too)."""

from __future__ import annotations

import os
import signal
import sys
import time

import dslaunch

out = os.environ["OUT_DIR"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
step_time = float(os.environ.get("STEP_TIME", "0.01"))
ready_after = int(os.environ.get("READY_AFTER", "3"))
calls = str(rank) not in os.environ.get("NO_CALL", "").split(",")
barrier = os.environ.get("NO_BARRIER") != "1"
if os.environ.get("IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if str(rank) in os.environ.get("DELAY_RANKS", "0").split(","):
    step_time += float(os.environ.get("RANK_DELAY", "0"))


def position(r: int) -> int:
    try:
        with open(os.path.join(out, f"pos.{r}")) as f:
            return int(f.read() or 0)
    except (OSError, ValueError):
        return 0


def reached(step: int) -> None:
    tmp = os.path.join(out, f".pos.{rank}")
    with open(tmp, "w") as f:
        f.write(str(step))
    os.replace(tmp, os.path.join(out, f"pos.{rank}"))


for step in range(1, 100_000):
    if calls and dslaunch.should_stop():
        with open(os.path.join(out, f"saved.{rank}"), "w") as f:
            f.write(f"{step}\n")
        sys.exit(0)
    time.sleep(step_time)  # the step's compute
    reached(step)
    while barrier and any(position(r) < step for r in range(world)):  # the step's allreduce
        time.sleep(0.001)
    if step == ready_after:
        open(os.path.join(out, f"ready.{rank}"), "w").close()
