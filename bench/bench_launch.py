"""Launcher benchmarks, each figure side by side with torchrun in the same run.

    python bench/bench_launch.py [--repeat N] [--write docs/benchmarks.md]

1. `--help`:   dslaunch --help vs torchrun --help
2. launch:     2 trivial ranks (no torch) vs torchrun --standalone --nproc-per-node 2
3. fail-fast:  a rank exits 1 while the other sleeps; time from that exit to the launcher's exit

Runs are interleaved (dslaunch, torchrun, dslaunch, ...) so load changes hit both alike;
medians are reported. This is a script, not a test: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block

BIN = Path(sys.executable).parent
DSLAUNCH = [str(BIN / "dslaunch")]
TORCHRUN = [str(BIN / "torchrun")]

TRIVIAL = "print('hi')\n"
FAILING = """\
import os, sys, time
if os.environ["RANK"] == "1":
    time.sleep(0.5)
    with open(os.environ["STAMP"], "w") as f:
        f.write(repr(time.time()))
    sys.exit(1)
time.sleep(60)
"""


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def failure_to_exit(cmd: list[str], stamp: Path) -> float:
    env = {**os.environ, "STAMP": str(stamp)}
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    end = time.time()
    return end - float(stamp.read_text())


def pairwise(repeat: int, ours: callable, theirs: callable) -> tuple[float, float]:  # type: ignore[valid-type]
    a, b = [], []
    for _ in range(repeat):
        a.append(ours())
        b.append(theirs())
    return statistics.median(a), statistics.median(b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--write", help="write the markdown table to this file")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-"))
    trivial = tmp / "trivial.py"
    trivial.write_text(TRIVIAL)
    failing = tmp / "failing.py"
    failing.write_text(FAILING)
    stamp = tmp / "stamp"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}

    rows = []
    ours, theirs = pairwise(args.repeat, lambda: timed([*DSLAUNCH, "--help"]), lambda: timed([*TORCHRUN, "--help"]))
    rows.append(("`--help` (wall, median)", ours, theirs, "dslaunch --help", "torchrun --help"))
    ours, theirs = pairwise(
        args.repeat,
        lambda: timed([*DSLAUNCH, "--nproc-per-node", "2", "--master-port", "0", str(trivial)], env),
        lambda: timed([*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(trivial)], env),
    )
    rows.append(
        (
            "2 trivial ranks, start to exit",
            ours,
            theirs,
            "dslaunch --nproc-per-node 2 trivial.py",
            "torchrun --standalone --nproc-per-node 2 trivial.py",
        )
    )
    ours, theirs = pairwise(
        max(3, args.repeat // 2),
        lambda: failure_to_exit([*DSLAUNCH, "--nproc-per-node", "2", "--master-port", "0", str(failing)], stamp),
        lambda: failure_to_exit([*TORCHRUN, "--standalone", "--nproc-per-node", "2", str(failing)], stamp),
    )
    rows.append(("rank failure to launcher exit", ours, theirs, "rank 1 exits 1, rank 0 sleeps", "same script"))

    load = os.getloadavg()
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, "
        f"load average {load[0]:.1f}, Python {sys.version.split()[0]}, median of {args.repeat} interleaved runs.",
        "",
        "| what | dslaunch | torchrun | ratio (torchrun / dslaunch) |",
        "|---|---|---|---|",
    ]
    for name, a, b, _, _ in rows:
        lines.append(f"| {name} | {a:.3f} s | {b:.3f} s | {b / a:.1f}x |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_launch", table)


if __name__ == "__main__":
    main()
