"""Multi-node start-up: dslaunch's ssh and pdsh runners vs a bare ``pdsh -R ssh -w <hosts> true``.

    python -m bench.bench_remote [--hosts 8,32] [--repeat 3]     # from the repository root

Run as a module from the repository root: the sshd comes from the dev-only ``testbeds`` package
there (not installed with dslaunch), which ``python -m`` finds on the path without any set-up.

One real sshd listens on N loopback addresses (127.0.1.1 ...), each a "host" in the hostfile.
The job is trivial (``--no-python /bin/true``, one rank per host), so the figure is the cost of
reaching N hosts, starting N node agents and collecting N exits. Runs are interleaved so load
changes hit all three alike; medians are reported. Needs root-less-enough sshd, ssh and pdsh.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from testbeds.ssh_cluster import start_cluster
except ModuleNotFoundError as exc:  # run as a script (bench/ first on the path, not the root)
    if exc.name != "testbeds":
        raise
    sys.exit("run from the repository root as: python -m bench.bench_remote [--hosts 8,32] [--repeat 3]")

DSLAUNCH = [sys.executable, "-m", "dslaunch"]


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd[:8])}...\n{done.stderr[-2000:]}")
    return elapsed


def bench(n: int, repeat: int) -> dict[str, float]:
    addrs = tuple(f"127.0.1.{i + 1}" for i in range(n))
    cluster = start_cluster(addrs)
    try:
        hostfile = Path(tempfile.mkdtemp()) / "hosts"
        hostfile.write_text("".join(f"{a} slots=1\n" for a in cluster.aliases))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PDSH_")}
        pdsh_env = {**env, "PDSH_SSH_ARGS_APPEND": f"-F {cluster.config}"}
        common = [
            "--hostfile",
            str(hostfile),
            "--ssh-config",
            str(cluster.config),
            "--fanout",
            "32",
            "--no-python",
            "/bin/true",
        ]
        cmds = {
            "pdsh true (baseline)": (
                ["pdsh", "-R", "ssh", "-f", "64", "-w", ",".join(cluster.aliases), "true"],
                pdsh_env,
            ),
            "dslaunch --launcher pdsh": ([*DSLAUNCH, "--launcher", "pdsh", *common], env),
            "dslaunch --launcher ssh": ([*DSLAUNCH, "--launcher", "ssh", *common], env),
        }
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for cmd, e in cmds.values():
            timed(cmd, e)  # warm caches and known paths
        for _ in range(repeat):
            for name, (cmd, e) in cmds.items():
                times[name].append(timed(cmd, e))
        return {k: statistics.median(v) for k, v in times.items()}
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="8,32")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.hosts.split(",")):
        medians = bench(n, args.repeat)
        base = medians["pdsh true (baseline)"]
        rows += [(n, name, t, t / base) for name, t in medians.items()]
    load = os.getloadavg()[0]
    print(f"| hosts | command | median wall (s) | vs baseline |   (load avg {load:.1f}, {os.cpu_count()} cores)")
    print("|---|---|---|---|")
    for n, name, t, ratio in rows:
        print(f"| {n} | {name} | {t:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
