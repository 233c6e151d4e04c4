"""A tqdm-style bar on stderr: BAR_UPDATES updates, each its own flushed write, between two lines."""

import os
import sys

n = int(os.environ.get("BAR_UPDATES", "20000"))
delay = float(os.environ.get("BAR_DELAY", "0"))
print("before the bar", file=sys.stderr, flush=True)
for i in range(n + 1):
    sys.stderr.write(f"\r{i * 100 // n:3d}%|{'#' * (i * 20 // n):20s}| {i}/{n}")
    sys.stderr.flush()
    if delay:
        import time

        time.sleep(delay)
sys.stderr.write("\n")
print("after the bar", file=sys.stderr, flush=True)
