"""Trivial rank (no torch) for remote launcher tests.

job.py echo ARGS...          print one JSON line with rank facts, argv and chosen env
job.py sleep DIR             write DIR/ready.<rank>, then sleep
job.py fail DIR RANK CODE    like sleep, but RANK exits CODE once every rank is ready
job.py usr1 DIR              like sleep, and write DIR/usr1.<rank> on SIGUSR1
job.py child DIR             like sleep, with a child process that outlives the rank unless killed
job.py daemon DIR CODE       double-fork a setsid daemon (stdio on /dev/null) that sleeps, then exit CODE
job.py chatty DIR CODE       double-fork a grandchild that keeps printing on the rank's stdout, then exit CODE
job.py detach DIR            double-fork a setsid daemon that execs `sleep 301` (the job's environment, stdio on
                             /dev/null), print that it is ready, then as sleep
job.py grace DIR RANK CODE S like fail; every other rank logs each SIGTERM to DIR/sigterm.<rank>, takes S seconds
                             to "checkpoint" after the first, writes DIR/saved.<rank> and exits 143
"""

import json
import os
import sys
import time

rank = int(os.environ["RANK"])
mode = sys.argv[1]
if mode == "echo":
    keys = [k for k in os.environ if k.startswith(("TEST_", "WANDB_", "HF_", "NCCL_", "DSLAUNCH_"))]
    print(
        json.dumps(
            {
                "rank": rank,
                "world": int(os.environ["WORLD_SIZE"]),
                "node": int(os.environ["NODE_RANK"]),
                "master": os.environ["MASTER_ADDR"],
                "port": os.environ["MASTER_PORT"],
                "conn": os.environ.get("SSH_CONNECTION", ""),
                "cwd": os.getcwd(),
                "argv": sys.argv[2:],
                "env": {k: os.environ[k] for k in keys},
            }
        ),
        flush=True,
    )
    sys.exit(0)
folder = sys.argv[2]
if mode in ("daemon", "chatty"):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            if mode == "daemon":
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                time.sleep(300)
            else:
                while True:
                    print(f"grandchild of rank {rank} still talking", flush=True)
                    time.sleep(0.1)
            os._exit(0)
        os._exit(0)
    os.wait()
    with open(os.path.join(folder, f"ready.{rank}"), "w") as f:
        f.write(str(os.getpid()))
    sys.exit(int(sys.argv[3]))
if mode == "detach":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv("/bin/sleep", ["sleep", "301"])
        os._exit(0)
    os.wait()
    print(f"rank {rank} ready, its daemon started", flush=True)
if mode == "usr1":
    import signal

    def _mark(_signum, _frame):
        with open(os.path.join(folder, f"usr1.{rank}"), "w") as f:
            f.write("got it")

    signal.signal(signal.SIGUSR1, _mark)
if mode == "grace":
    import signal

    def _checkpoint(_signum, _frame):
        with open(os.path.join(folder, f"sigterm.{rank}"), "a") as f:
            f.write(f"{time.time()}\n")
        if getattr(_checkpoint, "busy", False):
            return
        _checkpoint.busy = True
        time.sleep(float(sys.argv[5]))
        with open(os.path.join(folder, f"saved.{rank}"), "w") as f:
            f.write("saved")
        sys.exit(143)

    signal.signal(signal.SIGTERM, _checkpoint)
if mode == "child":
    import subprocess

    subprocess.Popen(["sleep", "300"])  # in the rank's session: killed with it only if someone kills the session
with open(os.path.join(folder, f"ready.{rank}"), "w") as f:
    f.write(str(os.getpid()))
if mode in ("fail", "grace") and rank == int(sys.argv[3]):
    world = int(os.environ["WORLD_SIZE"])
    deadline = time.time() + 30
    while time.time() < deadline and not all(os.path.exists(os.path.join(folder, f"ready.{r}")) for r in range(world)):
        time.sleep(0.05)
    print(f"rank {rank} failing now", file=sys.stderr, flush=True)
    sys.exit(int(sys.argv[4]))
time.sleep(300)
