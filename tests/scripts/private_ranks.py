"""A rank (no torch) that logs a record and prints a line; rank $FAIL_RANK then fails with an uncaught ValueError."""

import os

import dslaunch

dslaunch.get_logger("user").warning("user-warning", secret_name="HF_TOKEN")
print("private-ranks-done", flush=True)
if os.environ["RANK"] == os.environ.get("FAIL_RANK"):
    raise ValueError("rank failed on purpose")
