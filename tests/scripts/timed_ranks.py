"""Non-torch ranks that time regions with dslaunch's timers, in lock-step as synchronous training is.

argv: T0 PERIOD STEPS [SLOW_RANK SLOW_FROM SLOW_TO [FAIL_RANK FAIL_STEP]]. Step k ends at T0 + k*PERIOD on every
rank (the 'allreduce' region waits for it, as a collective waits for the slowest rank); 'forward' takes 20 ms, twice
that on SLOW_RANK for steps SLOW_FROM..SLOW_TO-1; 'backward' 10 ms. FAIL_RANK exits 1 at FAIL_STEP of attempt 0.
With TIMINGS_DIR set, each rank writes its own timings there, a JSON line per step (what timers.step() returned).
"""

import json
import os
import sys
import time

from dslaunch.bootstrap.timers import Timers

t0, period, steps = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
slow_rank, slow_from, slow_to, fail_rank, fail_step = (int(a) for a in [*sys.argv[4:9], -1, 0, 0, -1, 0][:5])
rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
timers = Timers(enabled=False)
start = t0 if attempt == 0 else time.time()  # attempt 0: a rank that started late catches up
where = os.environ.get("TIMINGS_DIR")
out = open(os.path.join(where, f"rank{rank}.jsonl"), "w") if where else None
for step in range(1, steps + 1):
    if rank == fail_rank and step == fail_step and attempt == 0:
        sys.exit(1)
    with timers("forward"):
        time.sleep(0.04 if rank == slow_rank and slow_from <= step < slow_to else 0.02)
    with timers("backward"):
        time.sleep(0.01)
    with timers("allreduce"):
        time.sleep(max(0.0, start + step * period - time.time()))
    timings = timers.step()
    if out is not None:
        out.write(json.dumps({"step": step, "t": timings}) + "\n")
        out.flush()
