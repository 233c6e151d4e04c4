"""Each rank writes its whole environment as JSON to OUT_DIR/rank<RANK>.json (no torch import)."""

import json
import os

with open(os.path.join(os.environ["OUT_DIR"], f"rank{os.environ['RANK']}.json"), "w", encoding="utf-8") as f:
    json.dump(dict(os.environ), f)
