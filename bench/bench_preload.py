"""Torch ranks to engine-ready: dslaunch (exec), dslaunch --preload torch, torchrun and the DeepSpeed launcher.

    python bench/bench_preload.py [--ranks 2,4,8] [--repeat 3] [--write docs/benchmarks.md]

1. time:    launch -> every rank past dslaunch.engine() and one all_reduce (the last rank's stamp), per
            rank count, the four launchers interleaved in each round; medians.
2. memory:  the sum of the ranks' PSS at that point (/proc/PID/smaps_rollup), exec vs preload.
3. files:   file-system calls (strace -f -c, the %file class: open, stat, access, readlink...) of the
            whole node (launcher, agent, zygote, ranks) from launch to engine-ready, exec vs preload.

The ranks write their stamp and leave with os._exit, so the launchers' teardown does not count. This is a
script, not a test: the machines are shared and noisy; the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import free_port, write_block

BIN = Path(sys.executable).parent
RANK = """\
import os, sys, time
import torch
import dslaunch

engine = dslaunch.engine()
t = torch.ones(1)
engine.comm.all_reduce(t)
assert t.item() == engine.world_size
out = os.environ["BENCH_OUT"]
with open(os.path.join(out, f"rank{engine.rank}"), "w") as f:
    f.write(f"{time.time()!r} {os.getpid()}")
if os.environ.get("BENCH_HOLD"):  # wait while the benchmark reads this rank's memory
    go = os.path.join(out, "go")
    while not os.path.exists(go):
        time.sleep(0.02)
sys.stdout.flush()
os._exit(0)
"""
LAUNCHERS = ("dslaunch", "dslaunch --preload torch", "torchrun", "deepspeed")


def command(launcher: str, n: int, script: Path) -> list[str]:
    port = str(free_port())
    if launcher.startswith("dslaunch"):
        extra = ["--preload", "torch"] if "preload" in launcher else []
        return [str(BIN / "dslaunch"), "--nproc-per-node", str(n), "--master-port", port, *extra, str(script)]
    if launcher == "torchrun":
        return [str(BIN / "torchrun"), "--nproc-per-node", str(n), "--master-port", port, str(script)]
    return [str(BIN / "deepspeed"), "--num_gpus", str(n), "--master_port", port, str(script)]


def _env(out: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "BENCH_OUT": str(out), "DSLAUNCH_PG_TIMEOUT": "120", **extra}
    env.pop("DSLAUNCH_PRELOAD", None)
    return env


def _fresh(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()


def _stamps(out: Path, n: int) -> list[tuple[float, int]]:
    found = []
    for rank in range(n):
        path = out / f"rank{rank}"
        if path.exists() and (text := path.read_text().split()) and len(text) == 2:
            found.append((float(text[0]), int(text[1])))
    return found


def time_to_ready(launcher: str, n: int, script: Path, out: Path) -> float:
    _fresh(out)
    start = time.time()
    proc = subprocess.run(
        command(launcher, n, script), env=_env(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    stamps = _stamps(out, n)
    if proc.returncode or len(stamps) != n:
        raise SystemExit(f"{launcher} with {n} ranks failed ({proc.returncode}):\n{proc.stderr.decode()[-2000:]}")
    return max(t for t, _ in stamps) - start


def pss(launcher: str, n: int, script: Path, out: Path) -> float:
    """MiB: the sum of the ranks' PSS once every rank is engine-ready."""
    _fresh(out)
    proc = subprocess.Popen(
        command(launcher, n, script), env=_env(out, BENCH_HOLD="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while len(_stamps(out, n)) < n and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    total = 0
    for _, pid in _stamps(out, n):
        with open(f"/proc/{pid}/smaps_rollup") as f:
            total += int(re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M).group(1))  # type: ignore[union-attr]
    (out / "go").touch()
    proc.wait()
    return total / 1024


def file_calls(launcher: str, n: int, script: Path, out: Path) -> int:
    """File-system system calls of the whole node from launch to every rank being ready (strace -f -c)."""
    _fresh(out)
    trace = out / "strace.txt"
    subprocess.run(
        ["strace", "-f", "-c", "-e", "trace=%file", "-o", str(trace), *command(launcher, n, script)],
        env=_env(out),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    for line in trace.read_text().splitlines():
        parts = line.split()
        if parts and parts[-1] == "total":
            return int(parts[3])
    return -1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="2,4,8")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--no-extras", action="store_true", help="time only: no PSS, no strace")
    parser.add_argument("--write", help="write the markdown tables to this file")
    args = parser.parse_args()
    counts = [int(n) for n in args.ranks.split(",")]
    launchers = args.launchers.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-preload-"))
    script = tmp / "ready.py"
    script.write_text(RANK)
    out = tmp / "out"
    load_before = os.getloadavg()[0]

    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeat):
        for n in counts:
            for launcher in launchers:  # interleaved: load changes hit every launcher alike
                times.setdefault((launcher, n), []).append(time_to_ready(launcher, n, script, out))
                print(f"{launcher} {n}: {times[launcher, n][-1]:.2f} s", file=sys.stderr, flush=True)
    med = {key: statistics.median(v) for key, v in times.items()}
    load = (load_before, os.getloadavg()[0])
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after (other jobs shared the machine), Python {sys.version.split()[0]}, "
        f"torch {_torch_version()}, median of {args.repeat} interleaved rounds. Time from launch until every rank "
        "is past `dslaunch.engine()` and one `all_reduce`:",
        "",
        "| ranks | " + " | ".join(f"`{name}`" for name in launchers) + " | torchrun / preload | deepspeed / preload "
        "| exec / preload |",
        "|---" * (len(launchers) + 4) + "|",
    ]
    for n in counts:
        row = [f"{med[name, n]:.2f} s" for name in launchers]
        pre = med.get(("dslaunch --preload torch", n))
        ratios = [
            f"{med[other, n] / pre:.1f}x" if pre and (other, n) in med else "-"
            for other in ("torchrun", "deepspeed", "dslaunch")
        ]
        lines.append(f"| {n} | " + " | ".join(row + ratios) + " |")
    if not args.no_extras:
        lines += ["", "| ranks | PSS exec | PSS preload | file calls exec | file calls preload | exec / preload |"]
        lines.append("|---|---|---|---|---|---|")
        for n in counts:
            a, b = pss("dslaunch", n, script, out), pss("dslaunch --preload torch", n, script, out)
            fa, fb = file_calls("dslaunch", n, script, out), file_calls("dslaunch --preload torch", n, script, out)
            lines.append(f"| {n} | {a:.0f} MiB | {b:.0f} MiB | {fa} | {fb} | {fa / fb:.1f}x |")
    table = "\n".join(lines)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_preload", table)
    shutil.rmtree(tmp, ignore_errors=True)


def _torch_version() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    return out.stdout.strip()


if __name__ == "__main__":
    main()
