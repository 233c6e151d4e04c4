"""Read an NCCL flight recorder dump with torch's own reader; print what the test checks as one JSON line.

python read_trace.py PATH PREFIX   (PREFIX: the file name up to the rank, as torch's reader strips it)
"""

import json
import pickle
import sys

path, prefix = sys.argv[1], sys.argv[2]
try:
    from torch.distributed.flight_recorder.components.loader import read_dump
except ImportError:  # a torch without the reader in torch.distributed: its format is a pickle all the same
    with open(path, "rb") as f:
        dump = pickle.load(f)
    reader = "pickle.load"
else:
    dump = read_dump(prefix, path)
    reader = "torch.distributed.flight_recorder.components.loader.read_dump"
entries = [
    {"name": e.get("profiling_name"), "state": e.get("state"), "seq": e.get("collective_seq_id")}
    for e in dump["entries"]
]
print(
    json.dumps(
        {
            "reader": reader,
            "rank": dump.get("rank"),
            "version": str(dump["version"]),
            "pg_config": sorted(str(k) for k in dump["pg_config"]),
            "entries": entries,
        }
    )
)
