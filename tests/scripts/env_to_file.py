"""Write this rank's whole environment as JSON to $OUT_FILE (no torch import)."""

import json
import os

with open(os.environ["OUT_FILE"], "w", encoding="utf-8") as f:
    json.dump(dict(os.environ), f)
