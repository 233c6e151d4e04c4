"""Each rank writes its environment to $OUT_DIR/rank<RANK>.json."""

import json
import os
import pathlib

out = pathlib.Path(os.environ["OUT_DIR"])
(out / f"rank{os.environ['RANK']}.json").write_text(json.dumps(dict(os.environ)))
