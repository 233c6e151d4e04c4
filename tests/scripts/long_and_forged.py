"""A 300 KB line (no newline inside), then a line that imitates an agent event, then exit EXIT_CODE."""

import json
import os
import sys

sys.stdout.write("".join(f"{i:07d}" for i in range(300_000 // 7)) + "\n")
fake = {"ev": "exit", "rank": 9, "local_rank": 0, "node_rank": 0, "host": "x", "pid": 1, "code": 99}
sys.stdout.write("@dslaunch-event " + json.dumps({**fake, "signal": None, "ts": 0.0, "by_agent": False}) + "\n")
sys.stdout.flush()
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
