"""A rank that fails until a given attempt: ``flaky.py FOLDER FAIL_RANK FAIL_UNTIL CODE [SLEEP [SLEEP_FAILING]]``.

Each rank appends "attempt rank" to FOLDER/attempts.txt; rank FAIL_RANK exits CODE while the
attempt (TORCHELASTIC_RESTART_COUNT) is below FAIL_UNTIL; the others sleep SLEEP seconds (default 0), or
SLEEP_FAILING seconds in an attempt that fails (default SLEEP): long enough to be stopped by the failure.
Each rank first makes a progress beat, as a training step would: its failures come after the first step, so
the repeat rule (docs/restarts.md) leaves them to --max-restarts.
"""

import os
import sys
import time

import dslaunch

folder, fail_rank, fail_until, code = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sleep = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if len(sys.argv) > 6 and attempt < fail_until:
    sleep = float(sys.argv[6])
assert os.environ["DSLAUNCH_RESTART_COUNT"] == str(attempt)
rank = int(os.environ["RANK"])
with open(os.path.join(folder, "attempts.txt"), "a") as f:
    f.write(f"{attempt} {rank} {os.environ['TORCHELASTIC_MAX_RESTARTS']}\n")
print(f"rank {rank} attempt {attempt}", flush=True)
dslaunch.heartbeat()
if rank == fail_rank and attempt < fail_until:
    sys.exit(code)
time.sleep(sleep)
