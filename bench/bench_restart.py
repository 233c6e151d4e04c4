"""A restart's cost: one rank fails after ``init_process_group``, the job restarts; time until every rank of the
next attempt is past it again. dslaunch (exec), dslaunch --preload torch (a warm zygote: torch stays imported
across attempts), torchrun --max-restarts 1, beside one bare ``python -c "import torch"``.

    python bench/bench_restart.py [--ranks 4] [--repeat 3] [--write docs/benchmarks.md]

Attempt 0: every rank gets past ``dslaunch.engine()`` (torchrun: ``init_process_group("gloo")``), then rank 1
stamps ``time.time()`` and exits 1; the others wait to be stopped. Attempt 1: every rank stamps the time once it
is past the same point, then leaves with os._exit. The figure is the last rank's stamp of attempt 1 minus the
failing rank's stamp. dslaunch runs with ``--restart-delay 0`` (torchrun has none). The launchers are
interleaved in each round; medians. A script, not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
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
import torch.distributed as dist

if os.environ.get("BENCH_TORCHRUN"):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
else:
    import dslaunch

    rank = dslaunch.engine().rank
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
out = os.environ["BENCH_OUT"]
if attempt == "0":
    if rank == 1:
        with open(os.path.join(out, "failed"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)
    time.sleep(120)  # stopped by the launcher
with open(os.path.join(out, f"ready{rank}"), "w") as f:
    f.write(repr(time.time()))
dist.barrier()  # nobody leaves before everyone is in: a rank that leaves early would fail the others
sys.stdout.flush()
os._exit(0)
"""
LAUNCHERS = ("dslaunch", "dslaunch --preload torch", "torchrun")


def command(launcher: str, n: int, script: Path) -> list[str]:
    port = str(free_port())
    if launcher.startswith("dslaunch"):
        extra = ["--preload", "torch"] if "preload" in launcher else []
        restart = ["--max-restarts", "1", "--restart-delay", "0"]
        return [str(BIN / "dslaunch"), "--nproc-per-node", str(n), "--master-port", port, *restart, *extra, str(script)]
    return [
        str(BIN / "torchrun"),
        "--nproc-per-node",
        str(n),
        "--master-port",
        port,
        "--max-restarts",
        "1",
        str(script),
    ]


def restart_time(launcher: str, n: int, script: Path, out: Path) -> float | str:
    """Seconds from the failing rank's exit to the last rank of attempt 1 past the rendezvous, or why not."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "BENCH_OUT": str(out), "DSLAUNCH_PG_TIMEOUT": "60"}
    env.pop("DSLAUNCH_PRELOAD", None)
    if launcher == "torchrun":
        env["BENCH_TORCHRUN"] = "1"
    # Its own session: a launcher that hangs is killed with everything it started (torchrun's ranks outlive it).
    proc = subprocess.Popen(
        command(launcher, n, script), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "hung until the 120 s time-out"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # what the launcher left behind, if anything
        except ProcessLookupError:
            pass
    ready = [out / f"ready{r}" for r in range(n)]
    if not (out / "failed").exists() or not all(p.exists() for p in ready):
        return _why(proc.returncode, stderr.decode(errors="replace"))
    failed = float((out / "failed").read_text())
    return max(float(p.read_text()) for p in ready) - failed


def _why(code: int, stderr: str) -> str:
    if "connectFullMesh" in stderr:  # torchrun's attempt 1 on this machine: a peer's old gloo address
        refused = "Connection refused" in stderr
        return f"exit {code}: attempt 1 died in gloo's connectFullMesh{', Connection refused' if refused else ''}"
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith(("=", " "))]
    return f"exit {code}: {lines[-1][-200:] if lines else 'no output'}"


def bare_import() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return time.perf_counter() - start


def _cell(values: list[float | str]) -> str:
    numbers = [v for v in values if isinstance(v, float)]
    if len(numbers) == len(values):
        return f"{statistics.median(numbers):.2f} s"
    whys = sorted({v for v in values if isinstance(v, str)})
    came = f" (came back in {', '.join(f'{v:.2f} s' for v in numbers)})" if numbers else ""
    return f"did not come back in {len(values) - len(numbers)} of {len(values)} rounds: {'; '.join(whys)}{came}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--write", help="write the markdown table into this file")
    args = parser.parse_args()
    launchers = args.launchers.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-restart-"))
    script = tmp / "restart.py"
    script.write_text(RANK)
    load_before = os.getloadavg()[0]
    results: dict[str, list[float | str]] = {name: [] for name in ("import torch", *launchers)}
    for _ in range(args.repeat):
        results["import torch"].append(bare_import())
        for launcher in launchers:  # interleaved: load changes hit every launcher alike
            results[launcher].append(restart_time(launcher, args.ranks, script, tmp / "out"))
            print(f"{launcher}: {results[launcher][-1]}", file=sys.stderr, flush=True)
    table = _table(args, launchers, results, load_before)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_restart", table)
    shutil.rmtree(tmp, ignore_errors=True)


def _table(
    args: argparse.Namespace, launchers: list[str], results: dict[str, list[float | str]], load_before: float
) -> str:
    imp = statistics.median([v for v in results["import torch"] if isinstance(v, float)])
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other jobs shared the machine), Python "
        f"{sys.version.split()[0]}, median of {args.repeat} interleaved rounds, {args.ranks} local CPU ranks (gloo). "
        "Time from the failing rank's exit (its own stamp) until every rank of attempt 1 is past "
        "`init_process_group` again; dslaunch with `--restart-delay 0`:",
        "",
        "| | time | / one `import torch` |",
        "|---|---|---|",
        f'| one bare `python -c "import torch"` | {imp:.2f} s | 1.00x |',
    ]
    for name in launchers:
        values = results[name]
        numbers = [v for v in values if isinstance(v, float)]
        ratio = f"{statistics.median(numbers) / imp:.2f}x" if len(numbers) == len(values) else "-"
        lines.append(f"| `{name}` restart | {_cell(values)} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
