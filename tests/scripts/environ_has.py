"""``environ_has.py NAME``: print one JSON line: this rank, and whether NAME is in its os.environ and in the
environment block the kernel shows others (/proc/self/environ: a forked rank shows its zygote's)."""

import json
import os
import sys

name = sys.argv[1]
with open("/proc/self/environ", "rb") as f:
    block = f.read().split(b"\0")
print(
    json.dumps(
        {
            "rank": int(os.environ["RANK"]),
            "os": name in os.environ,
            "proc": any(v.startswith(name.encode() + b"=") for v in block),
        }
    ),
    flush=True,
)
