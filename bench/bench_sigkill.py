"""How long after a launcher's SIGKILL until nothing of the job is left, per runner (docs/teardown.md, issue 55).

    python -m bench.bench_sigkill [--rounds 20] [--runners local,ssh,pdsh] [--write docs/teardown.md]

Run as a module from the repository root: the sshd comes from the dev-only ``testbeds`` package.

Each round starts a job whose every rank double-forks a ``setsid`` daemon (``sleep 301``, the run id in its
environment; ``tests/scripts/job.py detach``) and then sleeps: 2 hosts x 2 ranks over ssh and pdsh (one real sshd on
127.0.0.2/3), 2 ranks on the local runner, ``--shutdown-timeout 2``. Once every rank is ready the launcher gets
SIGKILL, and /proc is scanned every 5 ms for a process whose environment or command line carries the run id: the
figure is the time from the SIGKILL to the first scan that finds none. Runners are interleaved, so load changes hit
them alike; a round with anything left after 10 s counts as left (and is cleaned up).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: the repository root
from bench.docblock import write_block  # noqa: E402
from testbeds.ssh_cluster import SshCluster, start_cluster  # noqa: E402

JOB = ROOT / "tests" / "scripts" / "job.py"
LIMIT = 10.0


def _carrying(run_id: str) -> list[int]:
    """Live processes with the run id in their environment or command line (as tests/helpers.job_processes)."""
    mark, found = run_id.encode(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read()
        except OSError:
            continue
        if b"DSLAUNCH_RUN_ID=" + mark + b"\0" in env + b"\0" or mark in argv:
            found.append(int(entry))
    return found


def _where(runner: str, cluster: SshCluster | None) -> list[str]:
    if runner == "local" or cluster is None:
        return ["--nproc-per-node", "2", "--master-port", "0"]
    hosts = cluster.hostfile(["node1", "node2"], 2, name=f"hosts-{uuid.uuid4().hex[:6]}")
    return ["--hostfile", str(hosts), "--launcher", runner, "--ssh-config", str(cluster.config)]


def one_round(runner: str, cluster: SshCluster | None) -> float | None:
    """Seconds from the SIGKILL to nothing left; None when something was left at ``LIMIT``."""
    run_id = f"bsk{runner}{uuid.uuid4().hex[:8]}"
    world = 2 if runner == "local" else 4
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PDSH_", "DS_ENV_FILE", "DSLAUNCH_", "GLOO_"))}
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "dslaunch", *_where(runner, cluster), "--shutdown-timeout", "2"]
        argv += ["--run-id", run_id, str(JOB), "detach", tmp]
        launcher = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{tmp}/ready.{r}") for r in range(world)):
            if time.monotonic() > deadline or launcher.poll() is not None:
                launcher.kill()
                launcher.wait()
                raise RuntimeError(f"{runner}: the job did not start")
            time.sleep(0.02)
        killed = time.monotonic()
        launcher.kill()
        launcher.wait()
        while time.monotonic() - killed < LIMIT:
            if not _carrying(run_id):
                return time.monotonic() - killed
            time.sleep(0.005)
        for pid in _carrying(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runners", default="local,ssh,pdsh")
    parser.add_argument("--write", type=Path, help="write the table into this docs page (block bench_sigkill)")
    args = parser.parse_args()
    runners = args.runners.split(",")
    times: dict[str, list[float]] = {r: [] for r in runners}
    left = dict.fromkeys(runners, 0)
    loads = []
    cluster = start_cluster() if set(runners) - {"local"} else None
    try:
        for _ in range(args.rounds):
            for runner in runners:
                took = one_round(runner, cluster)
                loads.append(os.getloadavg()[0])
                if took is None:
                    left[runner] += 1
                else:
                    times[runner].append(took)
    finally:
        if cluster is not None:
            cluster.stop()
    lines = [
        f"{args.rounds} rounds per runner, interleaved; load average {min(loads):.0f}-{max(loads):.0f} on "
        f"{os.cpu_count()} cores (`python -m bench.bench_sigkill --rounds {args.rounds}`)",
        "",
        "| runner | launcher SIGKILL -> nothing of the job left: median | 90th percentile | max | rounds with a "
        f"process left at {LIMIT:g} s |",
        "|---|---|---|---|---|",
    ]
    for runner in runners:
        got = sorted(times[runner])
        p90 = got[min(len(got) - 1, int(0.9 * len(got)))] if got else float("nan")
        median = statistics.median(got) if got else float("nan")
        top = got[-1] if got else float("nan")
        lines.append(f"| {runner} | {median:.2f} s | {p90:.2f} s | {top:.2f} s | {left[runner]} of {args.rounds} |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_block(args.write, "bench_sigkill", table)


if __name__ == "__main__":
    main()
