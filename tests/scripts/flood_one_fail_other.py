"""Issue 22 item 1: rank 0 floods stdout, rank 3 exits 9 after a delay (stamping when), the others chat on stdout."""

import os
import sys
import time

rank = int(os.environ["RANK"])
if rank == 0:
    block = (b"z" * 99 + b"\n") * 10000
    while True:
        sys.stdout.buffer.write(block)
if rank == 3:
    time.sleep(float(os.environ.get("FAIL_DELAY", "1.5")))
    print("rank 3 gives up", flush=True)
    with open(os.environ["STAMP"], "w") as f:
        f.write(repr(time.time()))
    sys.exit(9)
while True:
    print(f"rank {rank} still here", flush=True)
    time.sleep(0.1)
