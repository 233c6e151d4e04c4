"""Rank for the Slurm spare tests (no torch). ``sleep-first DIR``: attempt 0 writes DIR/ready.<rank> and sleeps;
``fail-first``: rank 1 of attempt 0 exits 7; otherwise each rank prints one JSON line (rank, world size, the Slurm
node it runs on, master) and exits 0."""

import json
import os
import sys
import time

rank = int(os.environ["RANK"])
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
if attempt == 0 and sys.argv[1] == "sleep-first":
    with open(os.path.join(sys.argv[2], f"ready.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)
    sys.exit(0)
if attempt == 0 and sys.argv[1] == "fail-first":
    sys.exit(7 if rank == 1 else 0)
record = {"rank": rank, "world": int(os.environ["WORLD_SIZE"]), "host": os.environ["DSLAUNCH_HOST"]}
print(json.dumps({**record, "attempt": attempt, "master": os.environ["MASTER_ADDR"]}), flush=True)
