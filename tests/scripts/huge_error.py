"""Rank 0 fails with a 20 MB exception message (MODE=raise) or writes a 20 MB error file itself and exits 1
(MODE=file); rank 1, when stopped, holds its node agent up for a while, so the agent's peak memory can be read
while it lives."""

import json
import os
import signal
import sys
import time

SIZE = 20_000_000
if os.environ["RANK"] == "1":
    signal.signal(signal.SIGTERM, lambda *_: (time.sleep(1.5), os._exit(0)))
    time.sleep(60)
time.sleep(0.2)
if os.environ["MODE"] == "file":
    with open(os.environ["DSLAUNCH_ERROR_FILE"], "w") as f:
        json.dump({"traceback": "y" * SIZE, "ts": time.time(), "code": 1}, f)
    print("wrote a huge error file", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)
raise ValueError("x" * SIZE)
