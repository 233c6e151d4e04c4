"""A rank that waits for a file: ``until_file.py PATH`` exits 0 once PATH exists (looked for every 50 ms, 60 s
at most, then exits 1)."""

import os
import sys
import time

deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(1)
    time.sleep(0.05)
