"""A rank for pod restarts: ``pod_attempts.py DIR``. Appends "attempt rank world" to DIR/attempts.txt; on the first
attempt writes DIR/ready.RANK and sleeps (a pod is taken away meanwhile), on any later one exits 0."""

import os
import sys
import time

folder = sys.argv[1]
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
with open(os.path.join(folder, "attempts.txt"), "a") as f:
    f.write(f"{attempt} {rank} {os.environ['WORLD_SIZE']}\n")
if attempt == 0:
    with open(os.path.join(folder, f"ready.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(300)
