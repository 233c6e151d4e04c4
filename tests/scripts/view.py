"""Print this rank's argv, CPU affinity and OMP_NUM_THREADS as one JSON line; sleep SLEEP seconds."""

import json
import os
import sys
import time

view = {
    "rank": int(os.environ["RANK"]),
    "argv": sys.argv[1:],
    "cores": sorted(os.sched_getaffinity(0)),
    "omp": os.environ.get("OMP_NUM_THREADS"),
    "env": {
        k: v
        for k, v in os.environ.items()
        if k
        in (
            "DSLAUNCH_LOG_LEVEL",
            "DSLAUNCH_MESH",
            "DSLAUNCH_CONFIG",
            "DSLAUNCH_WALL_CLOCK_BREAKDOWN",
            "DSLAUNCH_COMMS_LOGGER",
            "DSLAUNCH_STEPS_PER_PRINT",
        )
    },
}
print("VIEW " + json.dumps(view), flush=True)
time.sleep(float(os.environ.get("SLEEP", "0")))
