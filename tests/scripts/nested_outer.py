"""Rank 0 starts dslaunch jobs of its own, one per case; rank 1 waits until they are over, then says it is alive.

Each case is ``name -> [extra environment, *extra options]``, from $NESTED_CASES (JSON); each inner job runs
$INNER_SCRIPT with OUT_FILE=$OUT_DIR/<name>.json. What each inner launcher returned: $OUT_DIR/results.json.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

out = pathlib.Path(os.environ["OUT_DIR"])
if os.environ["RANK"] == "0":
    results = {}
    for name, (extra_env, *options) in json.loads(os.environ["NESTED_CASES"]).items():
        env = {**os.environ, **extra_env, "OUT_FILE": str(out / f"{name}.json")}
        argv = [sys.executable, "-m", "dslaunch", "--nproc-per-node", "1", "--master-port", "0", *options]
        done = subprocess.run([*argv, os.environ["INNER_SCRIPT"]], env=env, capture_output=True, text=True, timeout=90)
        results[name] = {"code": done.returncode, "stderr": done.stderr[-3000:]}
    (out / "results.json").write_text(json.dumps(results))
    (out / "inner.done").write_text("")
else:
    deadline = time.monotonic() + 120
    while not (out / "inner.done").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    (out / "sibling.alive").write_text(os.environ["DSLAUNCH_RUN_ID"])
