"""A rank for the restart rules: ``repeat_fail.py DIR MODE [CODE or SECONDS]``. Each rank appends "attempt rank" to
DIR/attempts.txt; rank 1 then fails, before any step, in every attempt:

- ``import``: the same ModuleNotFoundError each time;
- ``exit``: exits CODE;
- ``flaky``: raises a RuntimeError whose message names the attempt (a different failure each time);
- ``stepped``: makes a progress beat (a step), then exits CODE;
- ``late``: as a script written for torchrun (no engine, no heartbeat) that trains a while: sleeps SECONDS,
  then raises the same RuntimeError each time (exit 1).

The other ranks sleep until they are stopped; every rank of the last attempt allowed (``TORCHELASTIC_MAX_RESTARTS``)
exits 0, so a job that gets every restart ends 0.
"""

import os
import sys
import time

folder, mode = sys.argv[1], sys.argv[2]
given = sys.argv[3] if len(sys.argv) > 3 else "1"
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
with open(os.path.join(folder, "attempts.txt"), "a") as f:
    f.write(f"{attempt} {rank}\n")
if attempt == int(os.environ["TORCHELASTIC_MAX_RESTARTS"]):
    sys.exit(0)
if rank != 1:
    time.sleep(30)
    sys.exit(0)
if mode == "import":
    import dslaunch_repeat_fail_no_such_module  # noqa: F401
elif mode == "exit":
    sys.exit(int(given))
elif mode == "flaky":
    raise RuntimeError(f"flaky failure number {attempt}")
elif mode == "stepped":
    import dslaunch

    dslaunch.heartbeat()
    sys.exit(int(given))
elif mode == "late":
    time.sleep(float(given))
    raise RuntimeError("NCCL watchdog: collective timed out")
