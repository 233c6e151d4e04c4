"""``python -m dslaunch.runners.remote.reap RUN_ID``: kill what is left of one job on this host.

``--host HOST RUN_ID`` kills only those with ``DSLAUNCH_HOST=HOST`` (hosts that share a machine).
``--agent-signal NAME RUN_ID`` instead sends signal NAME (TERM, USR1, ...) to the job's node agent here:
how the pdsh runner stops a node with its grace period, or relays a signal, since pdsh gives no per-host channel to
the agent.

The fallback for a node whose agent vanished (SIGKILL, OOM killer): its ranks die with it
(parent-death signal), but a rank's own children may not. Every process of a job carries
``DSLAUNCH_RUN_ID=<run id>`` in its environment; this kills exactly those, never by name.
It also deletes the job's staged plan file (pdsh), in case no agent came to read it, and its agents' pid files.
"""

from __future__ import annotations

import os
import signal
import sys

from dslaunch.oslib.procs import job_pids
from dslaunch.runners.remote import stage


def _is_agent(pid: int, proc: str = "/proc") -> bool:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            return b"dslaunch.agent" in f.read().split(b"\0")
    except OSError:
        return False


def signal_agent(run_id: str, name: str) -> int:
    signum = getattr(signal, f"SIG{name}", None)
    if not isinstance(signum, signal.Signals):
        print(f"dslaunch reap: unknown signal {name!r}", file=sys.stderr)
        return 2
    agents = [pid for pid in job_pids(run_id) if _is_agent(pid)]
    for pid in agents:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    print(f"dslaunch reap: SIG{name} sent to {len(agents)} agent(s) of run {run_id}")
    return 0


def _on_host(pid: int, host: str, proc: str = "/proc") -> bool:
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            return f"DSLAUNCH_HOST={host}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "--agent-signal" and argv[2]:
        return signal_agent(argv[2], argv[1])
    host = None
    if len(argv) == 3 and argv[0] == "--host" and argv[1]:
        host, argv = argv[1], argv[2:]
    if len(argv) != 1 or not argv[0]:
        print(
            "usage: python -m dslaunch.runners.remote.reap [--agent-signal NAME | --host HOST] RUN_ID", file=sys.stderr
        )
        return 2
    pids = [pid for pid in job_pids(argv[0]) if host is None or _on_host(pid, host)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    plans = os.path.join(os.path.expanduser("~"), stage.PLAN_DIR)
    try:
        staged = [n for n in os.listdir(plans) if n.startswith(f"{argv[0]}.") and n.endswith((".plan", ".pid"))]
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
