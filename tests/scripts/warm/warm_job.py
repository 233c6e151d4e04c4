"""Prints which zygote forked it (and its waiter's parent); rank FAIL_RANK exits 3 in attempt 0, then all pass."""

import os
import sys
import time

attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
rank = os.environ["RANK"]
with open(f"/proc/{os.getppid()}/stat", "rb") as f:
    grandparent = int(f.read().rsplit(b")", 1)[1].split()[1])
zygote = os.environ.get("DSLAUNCH_ZYGOTE_PID", "-")
print(f"attempt={attempt} rank={rank} zygote={zygote} grandparent={grandparent} pid={os.getpid()}", flush=True)
if os.environ.get("DAEMON_DIR"):  # a child in its own session, left behind: the job's end must take it
    import subprocess

    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    with open(os.path.join(os.environ["DAEMON_DIR"], f"daemon{attempt}-{rank}"), "w") as f:
        f.write(str(child.pid))
if attempt == "0" and rank == os.environ.get("FAIL_RANK", "1"):
    time.sleep(0.2)
    sys.exit(3)
if attempt == "0":
    time.sleep(float(os.environ.get("SLEEP", "30")))  # stopped by the launcher
