"""Ranks that step with dslaunch's timers and print a line per step: ``status_ranks.py STEPS PERIOD [BAR]``.
With BAR, rank 0 also draws a \\r progress bar over steps 5-9 (its line ends at step 10)."""

import sys
import time

from dslaunch.bootstrap.timers import Timers

steps, period, bar = int(sys.argv[1]), float(sys.argv[2]), len(sys.argv) > 3
import os  # noqa: E402

rank = int(os.environ["RANK"])
timers = Timers(enabled=False)
for step in range(1, steps + 1):
    with timers("forward"):
        time.sleep(period)
    timers.step()
    if bar and rank == 0 and 5 <= step < 10:
        sys.stdout.write(f"\rbar {step - 4}/5")
        sys.stdout.flush()
        continue
    if bar and rank == 0 and step == 10:
        sys.stdout.write("\n")
    print(f"rank {rank} step {step}", flush=True)
