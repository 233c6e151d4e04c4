"""Each rank writes its environment to $OUT_DIR/rank<RANK>.json; with $WAIT_FOR set, it then waits for that file."""

import json
import os
import pathlib
import time

out = pathlib.Path(os.environ["OUT_DIR"])
(out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(dict(os.environ)))
if os.environ.get("WAIT_FOR"):
    deadline = time.monotonic() + 60
    while not os.path.exists(os.environ["WAIT_FOR"]) and time.monotonic() < deadline:
        time.sleep(0.05)
