"""Rank for the elastic tests (no torch): attempt 0 writes DIR/ready.<rank> and sleeps; later attempts print
one JSON line (rank, world size, the address of the host it runs on, master) and exit 0."""

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
host = os.environ.get("SSH_CONNECTION", "- - local").split()[2]
record = {"rank": rank, "world": int(os.environ["WORLD_SIZE"]), "host": host, "attempt": attempt}
print(json.dumps({**record, "master": os.environ["MASTER_ADDR"]}), flush=True)
