"""Trivial rank: print its rank facts, optionally fail, sleep, or record signals."""

import json
import os
import signal
import sys
import time

KEYS = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DSLAUNCH_HOST",
    "DSLAUNCH_RUN_ID",
    "DSLAUNCH_CONFIG",
    "DSLAUNCH_LOG_LEVEL",
    "DSLAUNCH_MESH",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "ROLE_NAME",
    "ROLE_RANK",
    "SLURM_PROCID",
    "SLURM_TASK_PID",
)
rank = os.environ.get("RANK", "?")
out_dir = os.environ.get("OUT_DIR")


def on_signal(signum: int, _frame: object) -> None:
    if out_dir:
        with open(os.path.join(out_dir, f"rank{rank}.signals"), "a") as f:
            f.write(signal.Signals(signum).name + "\n")
    if signum == signal.SIGTERM:
        sys.exit(143)


signal.signal(signal.SIGUSR1, on_signal)
signal.signal(signal.SIGTERM, on_signal)
facts = {k: os.environ.get(k) for k in KEYS}
facts.update(pid=os.getpid(), argv=sys.argv[1:])
print("FACTS " + json.dumps(facts), flush=True)
if out_dir:
    open(os.path.join(out_dir, f"rank{rank}.ready"), "w").close()
if rank == os.environ.get("FAIL_RANK"):
    time.sleep(float(os.environ.get("FAIL_AFTER", "0")))
    sys.exit(int(os.environ["FAIL_CODE"]))
deadline = time.monotonic() + float(os.environ.get("SLEEP", "0"))
while time.monotonic() < deadline:
    time.sleep(0.05)
