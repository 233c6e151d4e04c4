"""Ranks that step with dslaunch's timers and print a line per step: ``status_ranks.py STEPS PERIOD [bar|err]``.
With ``bar``, rank 0 also draws a \\r progress bar over steps 5-9 (its line ends at step 10); with ``err``, every
rank also writes a line to stderr every 5th step."""

import sys
import time

from dslaunch.bootstrap.timers import Timers

steps, period = int(sys.argv[1]), float(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else ""
bar = mode == "bar"
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
    if mode == "err" and step % 5 == 0:
        print(f"rank {rank} note {step}", file=sys.stderr, flush=True)
