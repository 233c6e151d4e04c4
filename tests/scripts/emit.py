"""A trivial rank (no torch): one record per level, a collective record, timers, an exception."""

import logging
import os
import sys

import dslaunch
from dslaunch.logs import comm_record, timers_report

rank = os.environ.get("RANK", "?")
log = dslaunch.get_logger("user")
log.debug("user-debug", rank_seen=rank)
log.info("user-info", rank_seen=rank)
log.warning("user-warning", rank_seen=rank)
comm_record(op="all_reduce", axis="dp", group_size=2, dtype="float32", nbytes=4096, duration_s=0.002)
timers_report(7, {"fwd": 0.25, "bwd": 0.5})
try:
    {}["missing"]
except KeyError:
    log.exception("user-exception", step=3)
if "--basic-config" in sys.argv:  # the user's own root logging must still work
    logging.basicConfig(level=logging.INFO, format="ROOT %(message)s", stream=sys.stdout)
    logging.getLogger("user.script").info("user-root-info")
print("emit-done", flush=True)
