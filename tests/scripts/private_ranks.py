"""A rank (no torch) that logs a record and prints a line; rank $FAIL_RANK then fails with an uncaught ValueError,
but only once every other rank has logged and printed (each touches a file in $GATE_DIR): a rank that fails at
once can have its peers stopped before they write anything, and the test would find no rank0.jsonl."""

import os
import time
from pathlib import Path

import dslaunch

dslaunch.get_logger("user").warning("user-warning", secret_name="HF_TOKEN")
print("private-ranks-done", flush=True)
gate = Path(os.environ["GATE_DIR"])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if str(rank) != os.environ.get("FAIL_RANK"):
    (gate / f"rank{rank}.logged").touch()
else:
    deadline = time.monotonic() + 60
    while len(list(gate.glob("rank*.logged"))) < world - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    raise ValueError("rank failed on purpose")
