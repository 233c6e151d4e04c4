"""Each rank writes its argv and rank environment as JSON to OUT_DIR/rank<RANK>.json."""

import json
import os
import sys

KEYS = [
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DSLAUNCH_RUN_ID",
    "CROSS_RANK",
    "CROSS_SIZE",
    "LOCAL_SIZE",
    "CUDA_VISIBLE_DEVICES",
]
out = os.environ["OUT_DIR"]
record = {
    "argv": sys.argv[1:],
    "env": {k: os.environ.get(k) for k in KEYS},
    "name": __name__,
    "path0": sys.path[0],
    "argv0": sys.argv[0],
}
with open(os.path.join(out, f"rank{os.environ['RANK']}.json"), "w", encoding="utf-8") as f:
    json.dump(record, f)
print(f"hello from {os.environ['RANK']}")
