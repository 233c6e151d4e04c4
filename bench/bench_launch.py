"""Launcher benchmarks, each figure side by side with torchrun in the same run.

    python bench/bench_launch.py [--repeat N] [--write docs/benchmarks.md]

1. `--help`:   dslaunch --help vs torchrun --help
2. launch:     2 trivial ranks (no torch) vs torchrun --standalone --nproc-per-node 2
3. fail-fast:  a rank exits 1 while the other sleeps; time from that exit to the launcher's exit

Runs are interleaved (dslaunch, torchrun, dslaunch, ...) so load changes hit both alike, after one
untimed run of each (so neither pays for a cold page cache); medians are reported, with the fastest
and slowest run beside them. This is a script, not a test: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
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


def pairwise(repeat: int, ours: Callable[[], float], theirs: Callable[[], float]) -> tuple[list[float], list[float]]:
    ours(), theirs()  # warm-up, untimed
    a, b = [], []
    for _ in range(repeat):
        a.append(ours())
        b.append(theirs())
    return a, b


def cell(times: list[float]) -> str:
    return f"{statistics.median(times):.3f} s ({min(times):.3f}-{max(times):.3f})"


def torch_version() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip() or "?"


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
    load_before = os.getloadavg()[0]

    rows = []
    ours, theirs = pairwise(args.repeat, lambda: timed([*DSLAUNCH, "--help"]), lambda: timed([*TORCHRUN, "--help"]))
    rows.append(("`--help`", ours, theirs, "dslaunch --help", "torchrun --help"))
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

    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after, Python {sys.version.split()[0]}, "
        f"torch {torch_version()}, median of {args.repeat} interleaved runs (fail-fast: "
        f"{max(3, args.repeat // 2)}), fastest-slowest in brackets.",
        "",
        "| what | dslaunch | torchrun | ratio of the medians (torchrun / dslaunch) |",
        "|---|---|---|---|",
    ]
    for name, a, b, _, _ in rows:
        lines.append(f"| {name} | {cell(a)} | {cell(b)} | {statistics.median(b) / statistics.median(a):.1f}x |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_launch", table)


if __name__ == "__main__":
    main()
