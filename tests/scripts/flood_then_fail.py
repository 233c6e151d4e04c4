"""Rank 1 exits 7 after a short delay (stamping when); every other rank floods stdout until stopped."""

import os
import sys
import time

if os.environ["RANK"] == "1":
    time.sleep(float(os.environ.get("FAIL_DELAY", "1.0")))
    print("rank 1 gives up", file=sys.stderr, flush=True)
    with open(os.environ["STAMP"], "w") as f:
        f.write(repr(time.time()))
    sys.exit(7)
block = (b"z" * 99 + b"\n") * 10000
while True:
    sys.stdout.buffer.write(block)
