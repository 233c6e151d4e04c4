"""Logging call costs, dslaunch side by side with the standard library, in one run.

    python bench/bench_logging.py [--runs 5]      # CPU time, interleaved runs
    python bench/bench_logging.py --instr         # instructions per call under valgrind (deterministic)

Disabled: ``log.debug("step", i=i)`` at level WARNING vs stdlib ``logger.debug("step %d", i)``.
Enabled:  one JSON record (static rank fields, ISO UTC ts) vs one stdlib record with
``Formatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s")``; both written to /dev/null.
CPU time (time.process_time), best of 7 repeats per run, minimum across runs; runs are
interleaved so load changes hit every case alike. Ratios net of the bare loop are the result.
With --instr each case runs N=2000 and N=12000 times under cachegrind (PYTHONHASHSEED=0);
(Ir(12000) - Ir(2000)) / 10000 is the cost per call with start-up cancelled: stable on a loaded box.
Goals: disabled <= 0.9x stdlib, enabled JSON <= 1.0x stdlib.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
import timeit

from dslaunch.logs import _core

N_OFF, N_ON = 200_000, 10_000


def _setup() -> dict[str, object]:
    devnull = open(os.devnull, "w")
    off = logging.getLogger("bench.stdlib.off")
    off.setLevel(logging.WARNING)
    on = logging.getLogger("bench.stdlib.on")
    on.setLevel(logging.INFO)
    on.propagate = False
    handler = logging.StreamHandler(devnull)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(name)s: %(message)s"))
    on.addHandler(handler)
    _core.configure(
        "warning,user=info",
        role="rank",
        fmt="json",
        ranks="all",
        facts={"rank": 3, "local_rank": 3, "node_rank": 0, "world_size": 8, "host": "bench", "run_id": "b"},
    )

    def nop(event: str, **kw: object) -> None:
        return None

    return {
        "std_off": off,
        "std_on": on,
        "ds_off": _core.get_logger("comm"),
        "ds_on": _core.get_logger("user"),
        "nop": nop,
        "i": 7,
        "devnull": devnull,
    }


CASES = {
    "pass": ("pass", N_OFF),
    "empty function nop('step', i=i)": ("nop('step', i=i)", N_OFF),
    "stdlib disabled logger.debug('step %d', i)": ("std_off.debug('step %d', i)", N_OFF),
    "dslaunch disabled log.debug('step', i=i)": ("ds_off.debug('step', i=i)", N_OFF),
    "stdlib enabled, formatted record": ("std_on.info('step %d', i)", N_ON),
    "dslaunch enabled, JSON record": ("ds_on.info('step', i=i)", N_ON),
}


def measure(runs: int) -> dict[str, float]:
    env = _setup()
    best: dict[str, float] = {}
    saved = sys.stderr
    sys.stderr = env["devnull"]  # type: ignore[assignment]  # the JSON console sink
    try:
        for _ in range(runs):
            for name, (stmt, n) in CASES.items():
                t = timeit.Timer(stmt, globals=env, timer=time.process_time)
                ns = min(t.repeat(7, n)) / n * 1e9
                best[name] = min(best.get(name, ns), ns)
    finally:
        sys.stderr = saved
    return best


def _instr_case(name: str, n: int) -> None:
    """Run one case n times (the body valgrind measures)."""
    env = _setup()
    stmt = CASES[name][0]
    code = compile(f"for _k in range({n}):\n    {stmt}\n", "<case>", "exec")
    saved = sys.stderr
    sys.stderr = env["devnull"]  # type: ignore[assignment]
    try:
        exec(code, env)
    finally:
        sys.stderr = saved


def _irefs(name: str, n: int) -> int:
    import re

    proc = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--case",
            name,
            "--n",
            str(n),
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    match = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    assert match, proc.stderr[-2000:]
    return int(match.group(1).replace(",", ""))


def measure_instr() -> dict[str, float]:
    return {name: (_irefs(name, 12000) - _irefs(name, 2000)) / 10000 for name in CASES}


def import_check() -> tuple[float, bool]:
    code = (
        "import time, sys; t=time.perf_counter(); import dslaunch.logs; "
        "print(time.perf_counter()-t, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]) * 1e3, out[1] == "True"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instr", action="store_true", help="instructions per call under valgrind cachegrind")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        _instr_case(args.case, args.n)
        return
    ns = measure_instr() if args.instr else measure(args.runs)
    unit = "instr/call" if args.instr else "ns/call (best)"
    loop = ns["pass"]
    net = {k: v - loop for k, v in ns.items()}
    std_off, std_on = net["stdlib disabled logger.debug('step %d', i)"], net["stdlib enabled, formatted record"]
    print(f"| case | {unit} | net of loop | vs stdlib |")
    print("|---|---:|---:|---:|")
    for name in CASES:
        ref = std_on if "enabled" in name else std_off
        ratio = "-" if name == "pass" else f"{net[name] / ref:.2f}x"
        print(f"| {name} | {ns[name]:.0f} | {net[name]:.0f} | {ratio} |")
    ms, torch_loaded = import_check()
    print(f"\nimport dslaunch.logs: {ms:.1f} ms, torch imported: {torch_loaded}")
    off = net["dslaunch disabled log.debug('step', i=i)"] / std_off
    on = net["dslaunch enabled, JSON record"] / std_on
    ok = off <= 0.9 and on <= 1.0 and not torch_loaded
    print(f"disabled {off:.2f}x (goal <= 0.90x), enabled JSON {on:.2f}x (goal <= 1.00x): {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
