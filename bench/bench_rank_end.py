"""A whole torch job, launch to exit, ends included: dslaunch --preload torch (ranks end with os._exit after
atexit and the flushes, docs/teardown.md), the same with full interpreter finalisation, and torchrun.

    python bench/bench_rank_end.py [--ranks 8] [--repeat 3] [--write docs/benchmarks.md]

Each rank inits gloo (``dslaunch.engine()``), all_reduces once and returns: the script ends as scripts do, so
every launcher pays its ranks' ends. Wall time is launch to the launcher's exit; CPU-seconds are user + system
of the launcher and every process it waited for (``wait4``'s children usage: agents, zygote, ranks). Medians of
``--repeat`` interleaved rounds; the load average is printed with the figures: the machines are shared.
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
from bench.docblock import free_port, write_block

BIN = Path(sys.executable).parent
RANK = """\
import torch
import dslaunch

engine = dslaunch.engine()
t = torch.ones(1)
engine.comm.all_reduce(t)
assert t.item() == engine.world_size
"""
PRELOAD = "dslaunch --preload torch"
FINALISING = "dslaunch --preload torch, DSLAUNCH_RANK_FINALIZE=1"
BARE_IMPORT = 'python -c "import torch"'
LAUNCHERS = (PRELOAD, FINALISING, "torchrun")


def command(launcher: str, n: int, script: Path) -> list[str]:
    if launcher == BARE_IMPORT:
        return [sys.executable, "-c", "import torch"]
    port = str(free_port())
    if launcher.startswith("dslaunch"):
        return [
            str(BIN / "dslaunch"),
            "--nproc-per-node",
            str(n),
            "--master-port",
            port,
            "--preload",
            "torch",
            str(script),
        ]
    return [str(BIN / "torchrun"), "--nproc-per-node", str(n), "--master-port", port, str(script)]


def _env(launcher: str) -> dict[str, str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DSLAUNCH_PG_TIMEOUT": "120"}
    env.pop("DSLAUNCH_PRELOAD", None)
    env.pop("DSLAUNCH_RANK_FINALIZE", None)
    if launcher == FINALISING:
        env["DSLAUNCH_RANK_FINALIZE"] = "1"
    return env


def run_job(launcher: str, n: int, script: Path) -> tuple[float, float]:
    """(wall seconds, CPU-seconds) of one whole job."""
    start = time.monotonic()
    proc = subprocess.Popen(
        command(launcher, n, script), env=_env(launcher), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{launcher} with {n} ranks failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", help="write the markdown table into this file (block bench_rank_end)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-rank-end-"))
    script = tmp / "job.py"
    script.write_text(RANK)
    load_before = os.getloadavg()[0]
    runs: dict[str, list[tuple[float, float]]] = {}
    for _ in range(args.repeat):
        for launcher in (*LAUNCHERS, BARE_IMPORT):  # interleaved: load changes hit every launcher alike
            runs.setdefault(launcher, []).append(run_job(launcher, args.ranks, script))
            wall, cpu = runs[launcher][-1]
            print(f"{launcher}: {wall:.2f} s wall, {cpu:.2f} CPU-s", file=sys.stderr, flush=True)
    table = _table(runs, args, (load_before, os.getloadavg()[0]))
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_rank_end", table)
    script.unlink()
    tmp.rmdir()


def _table(runs: dict[str, list[tuple[float, float]]], args: argparse.Namespace, load: tuple[float, float]) -> str:
    med = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for name, v in runs.items()}
    base_wall, base_cpu = med["torchrun"]
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after (other jobs shared the machine), Python {sys.version.split()[0]}, "
        f"torch {_torch_version()}, median of {args.repeat} interleaved rounds. {args.ranks} ranks on one node, "
        "each `dslaunch.engine()` (gloo), one `all_reduce`, then the script returns; launch to the launcher's exit:",
        "",
        "| launcher | wall | CPU-s | torchrun wall / this | torchrun CPU-s / this |",
        "|---|---|---|---|---|",
    ]
    for name in (*LAUNCHERS, BARE_IMPORT):
        wall, cpu = med[name]
        label = f"`{name}`" if name != BARE_IMPORT else f"one `{BARE_IMPORT}` (for scale)"
        lines.append(f"| {label} | {wall:.2f} s | {cpu:.2f} | {base_wall / wall:.1f}x | {base_cpu / cpu:.1f}x |")
    return "\n".join(lines)


def _torch_version() -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    )
    return out.stdout.strip()


if __name__ == "__main__":
    main()
