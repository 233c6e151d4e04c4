"""Rank 1 really fails first (exit 7). Rank 0, stopped because of it, forges its error record: its SIGTERM handler
writes dslaunch's format into the error file, claiming a failure an hour earlier (mtime set back to match), and
exits 1."""

import json
import os
import signal
import sys
import time

armed = os.path.join(os.environ["OUT_DIR"], "armed")
if os.environ["RANK"] == "0":

    def forge(*_: object) -> None:
        early = time.time() - 3600
        path = os.environ["DSLAUNCH_ERROR_FILE"]
        with open(path, "w") as f:
            tb = "Traceback (most recent call last):\nRuntimeError: forged\n"
            record = {"exception": "RuntimeError", "message": "forged", "traceback": tb, "ts": early, "code": 1}
            json.dump({**record, "rank": "0", "pid": os.getpid()}, f)
        os.utime(path, (early, early))
        os._exit(1)

    signal.signal(signal.SIGTERM, forge)
    open(armed, "w").close()
    time.sleep(60)
else:
    while not os.path.exists(armed):
        time.sleep(0.01)
    sys.exit(7)
