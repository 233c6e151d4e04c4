"""Trivial Python ranks for the hang tests (no torch).

waiter.py wait DIR      print "ready", write DIR/ready.<rank>, then wait in waiting_here() until DIR/go exists, and
                        exit 0
waiter.py print SECS    print a line every 0.4 s for SECS seconds (output is progress), then exit 0
waiter.py beat SECS     call dslaunch.heartbeat() every 0.4 s for SECS seconds, printing nothing, then exit 0
waiter.py silent BEATS [DIR]  heartbeat BEATS times (BEATS: comma-separated, one per rank), write DIR/ready.<rank>,
                              then sleep in stuck_here()
"""

import os
import sys
import time

import dslaunch

mode, arg = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])


def waiting_here(folder: str) -> None:
    while not os.path.exists(os.path.join(folder, "go")):
        time.sleep(0.05)


def stuck_here() -> None:
    time.sleep(60)


if mode == "wait":
    print("ready", flush=True)
    with open(os.path.join(arg, f"ready.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    waiting_here(arg)
elif mode in ("print", "beat"):
    end = time.monotonic() + float(arg)
    while time.monotonic() < end:
        if mode == "print":
            print("working", flush=True)
        else:
            dslaunch.heartbeat()
        time.sleep(0.4)
elif mode == "silent":
    for _ in range(int(arg.split(",")[rank])):
        dslaunch.heartbeat()
    if len(sys.argv) > 3:
        with open(os.path.join(sys.argv[3], f"ready.{rank}"), "w") as f:
            f.write(str(os.getpid()))
    stuck_here()
