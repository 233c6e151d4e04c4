"""Rank 1 fails first but takes long to exit (an at-exit teardown); rank 0 fails after it, and ends first.

``slow_exit.py FOLDER``: the summary must still name rank 1, with the code it failed with.
"""

import atexit
import os
import sys
import time

folder = sys.argv[1]
rank = int(os.environ["RANK"])
if rank == 1:
    atexit.register(time.sleep, 5)  # like a process group's teardown after a peer vanished
    open(os.path.join(folder, "failed"), "w").close()
    raise ValueError("boom from rank 1, which fails first")
while not os.path.exists(os.path.join(folder, "failed")):
    time.sleep(0.01)
time.sleep(0.3)
print("rank 0: Connection closed by peer", file=sys.stderr)
sys.exit(3)
