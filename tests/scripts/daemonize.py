"""Each rank starts a setsid daemon (a double fork) that would outlive it, says so, and waits."""

import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(60)
        os._exit(0)
    os._exit(0)
os.wait()
print(f"daemon started by rank {os.environ['RANK']}", flush=True)
time.sleep(60)
