"""Rank FAIL_RANK fails after a short delay (exit FAIL_CODE, a signal, or an exception); others sleep."""

import os
import signal
import sys
import time

rank = int(os.environ["RANK"])
if rank == int(os.environ.get("FAIL_RANK", "1")):
    time.sleep(float(os.environ.get("FAIL_DELAY", "0.3")))
    how = os.environ.get("FAIL_HOW", "exit")
    if how == "exit":
        sys.exit(int(os.environ.get("FAIL_CODE", "3")))
    if how == "signal":
        os.kill(os.getpid(), getattr(signal, os.environ.get("FAIL_SIGNAL", "SIGKILL")))
    print("about to fail", file=sys.stderr)
    raise ValueError(f"boom from rank {rank}")
with open(os.path.join(os.environ["OUT_DIR"], f"sleeper{rank}.pid"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(60)
