"""A rank for bench/bench_observe.py: STEPS steps of ~100 ms (forward 60 ms, backward 30 ms, allreduce 10 ms, each
a sleep inside a dslaunch timer region); writes its mean step wall time over steps 11..STEPS to OUT/rankN.txt."""

import os
import sys
import time

from dslaunch.bootstrap.timers import Timers

out, steps = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
timers = Timers(enabled=False)
times = []
for _step in range(1, steps + 1):
    start = time.perf_counter()
    for region, seconds in (("forward", 0.06), ("backward", 0.03), ("allreduce", 0.01)):
        with timers(region):
            time.sleep(seconds)
    timers.step()
    times.append(time.perf_counter() - start)
with open(os.path.join(out, f"rank{rank}.txt"), "w") as f:
    f.write(f"{sum(times[10:]) / len(times[10:])}\n")
