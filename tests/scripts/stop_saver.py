"""A rank that trains as a DataLoader user's does, without torch: two forked worker children, PyTorch's "worker
killed" check (a SIGCHLD handler that fails the rank when a worker dies by a signal, as DataLoader's does), and a
SIGTERM handler that lets the step finish, saves, shuts its workers down and exits 0.

argv: OUT_DIR [STEP_SECONDS]. Writes OUT_DIR/rank<R>.ready (its pid and its workers'), then, when stopped,
OUT_DIR/rank<R>.saved (the step) and OUT_DIR/rank<R>.stops (one line per SIGTERM it heard). IGNORE_STOP=1: ignores
SIGTERM and never saves (no worker check either). WORKERS=N: N workers instead of 2.
"""

from __future__ import annotations

import os
import signal
import sys
import time

out = sys.argv[1]
step_seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
rank = int(os.environ["RANK"])
ignore = os.environ.get("IGNORE_STOP") == "1"
stop_requested = False


def _worker() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a SIGTERM that is not its parent's kills it, as DataLoader's
    parent = os.getppid()
    while os.getppid() == parent:  # a worker ends with its rank
        time.sleep(0.05)
    os._exit(0)


workers = []
for _ in range(int(os.environ.get("WORKERS", "2"))):
    pid = os.fork()
    if pid == 0:
        _worker()
    workers.append(pid)


def _check_workers(_signum: int, _frame: object) -> None:
    for pid in workers:
        try:
            ended, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        if ended and os.WIFSIGNALED(status):
            name = signal.Signals(os.WTERMSIG(status)).name
            raise RuntimeError(f"DataLoader worker (pid {pid}) is killed by signal: {name}")


def _on_term(signum: int, _frame: object) -> None:
    global stop_requested
    stop_requested = True
    with open(os.path.join(out, f"rank{rank}.stops"), "a") as f:
        f.write(signal.Signals(signum).name + "\n")


if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGCHLD, _check_workers)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, _on_term)

with open(os.path.join(out, f"rank{rank}.ready"), "w") as f:
    f.write(" ".join(str(p) for p in (os.getpid(), *workers)))

step = 0
while True:
    time.sleep(step_seconds)  # the step: the workers must live through it
    step += 1
    if stop_requested:
        time.sleep(0.2)  # the save takes a while, workers still alive
        tmp = os.path.join(out, f".rank{rank}.tmp")
        with open(tmp, "w") as f:
            f.write(str(step))
        os.replace(tmp, os.path.join(out, f"rank{rank}.saved"))
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # shut the workers down, as DataLoader does at its end
        for pid in workers:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        sys.exit(0)
