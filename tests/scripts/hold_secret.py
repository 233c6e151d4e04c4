"""A rank that checks it received SECRET_TOKEN (by hash, never printing it), says so, then waits for RELEASE."""

import hashlib
import os
import sys
import time

token = os.environ.get("SECRET_TOKEN", "")
ok = hashlib.sha256(token.encode()).hexdigest() == os.environ.get("SECRET_SHA256")
rank = os.environ.get("RANK", "?")
print(f"rank {rank} secret received: {ok}", flush=True)
with open(os.path.join(os.environ["OUT_DIR"], f"ready.{rank}"), "w") as f:
    f.write("ok" if ok else "missing")
deadline = time.monotonic() + 30
while not os.path.exists(os.environ["RELEASE"]) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(0 if ok else 5)
