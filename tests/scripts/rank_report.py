"""Print this rank's view as one JSON line; FAIL_AFTER s later exit FAIL_CODE on rank FAIL_RANK (or kill itself
with FAIL_SIGNAL); other ranks sleep SLEEP s."""

import json
import os
import sys
import time

rank = int(os.environ["RANK"])
keys = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "FROM_LAUNCHER_ARGS",
    "DSLAUNCH_HOST",
    "SSH_CONNECTION",
    "TORCHELASTIC_RUN_ID",
    "ROLE_RANK",
)
view = {k: os.environ.get(k) for k in keys}
view["mpi_vars"] = sorted(k for k in os.environ if k.startswith(("OMPI_COMM_WORLD", "PMI_RANK", "PMIX_RANK")))
view["argv"] = sys.argv[1:]
print("REPORT " + json.dumps(view), flush=True)
if os.environ.get("FAIL_RANK") == str(rank):
    time.sleep(float(os.environ.get("FAIL_AFTER", "0.3")))
    if os.environ.get("FAIL_SIGNAL"):
        os.kill(os.getpid(), int(os.environ["FAIL_SIGNAL"]))
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
if os.environ.get("SLEEP"):
    time.sleep(float(os.environ["SLEEP"]))
