"""``python -m dslaunch.remote.reap RUN_ID``: kill what is left of one job on this host.

The fallback for a node whose agent vanished (SIGKILL, OOM killer): its ranks die with it
(parent-death signal), but a rank's own children may not. Every process of a job carries
``DSLAUNCH_RUN_ID=<run id>`` in its environment; this kills exactly those, never by name.
It also deletes the job's staged plan file (pdsh), in case no agent came to read it.
"""

from __future__ import annotations

import os
import signal
import sys

from dslaunch.remote import stage


def job_pids(run_id: str, proc: str = "/proc") -> list[int]:
    marker = f"DSLAUNCH_RUN_ID={run_id}".encode()
    mine = {os.getpid(), os.getppid()}
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) in mine:
            continue
        try:
            with open(f"{proc}/{entry}/environ", "rb") as f:
                if marker in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python -m dslaunch.remote.reap RUN_ID", file=sys.stderr)
        return 2
    pids = job_pids(argv[0])
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    plans = os.path.join(os.path.expanduser("~"), stage.PLAN_DIR)
    try:
        staged = [name for name in os.listdir(plans) if name.startswith(f"{argv[0]}.") and name.endswith(".plan")]
    except OSError:
        staged = []
    for name in staged:
        try:
            os.unlink(os.path.join(plans, name))
        except OSError:
            pass
    print(f"dslaunch reap: {len(pids)} process(es) of run {argv[0]} killed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
