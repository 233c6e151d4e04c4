"""``bare_daemon.py DIR``: each rank double-forks a daemon that leaves its session and runs ``sleep 300`` with an
empty environment (no run id to find it by), writes its pid to DIR/daemon.RANK, then writes DIR/ready.RANK and
sleeps."""

import os
import sys
import time

folder, rank = sys.argv[1], int(os.environ["RANK"])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.path.join(folder, f"daemon.{rank}"), "w") as f:
            f.write(str(os.getpid()))
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execve("/bin/sleep", ["sleep", "300"], {})
    os._exit(0)
os.wait()
with open(os.path.join(folder, f"ready.{rank}"), "w") as f:
    f.write(str(os.getpid()))
time.sleep(300)
