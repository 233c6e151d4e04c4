"""Teardown stress check: finished torch jobs must exit 0 every time (issue 10).

    .venv/bin/python bench/stress_teardown.py --runs 200 --load 2
    .venv-torch-newest/bin/python bench/stress_teardown.py --runs 200 --load 2 --jobs demo

Runs the demo (4 ranks, FSDP2 + TP on dp=2,tp=2) and a 2-rank DDP script back to back,
``--runs`` times each, with ``--load`` busy-looping processes beside them. Prints failures
per 100 runs and, for each failure, the exit code and the failing ranks' last stderr lines.
The python running this script is the one the jobs use, so its venv picks the torch version.
Exit status: 0 when no run failed.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JOBS = {
    "demo": [
        "--nproc-per-node",
        "4",
        "--master-port",
        "0",
        "--mesh",
        "dp=2,tp=2",
        str(ROOT / "examples" / "train.py"),
        "--steps",
        "8",
    ],
    "ddp": ["--nproc-per-node", "2", "--master-port", "0", str(ROOT / "tests" / "scripts" / "ending.py")],
}
JOB_ENV = {"demo": {}, "ddp": {"MODE": "ddp"}}


def _spin() -> None:
    while True:
        pass


def run_once(job: str, extra: list[str], timeout: float) -> tuple[int, str, float]:
    env = {**os.environ, "DSLAUNCH_PG_TIMEOUT": "60", "CUDA_VISIBLE_DEVICES": "", **JOB_ENV[job]}
    started = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-m", "dslaunch", *extra, *JOBS[job]],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            cwd=ROOT,
        )
        code, err = out.returncode, out.stderr
    except subprocess.TimeoutExpired as exc:
        code, err = -1, f"timed out after {timeout} s\n{exc.stderr or ''}"
    return code, err, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20, help="runs of each job")
    parser.add_argument("--load", type=int, default=0, help="busy-looping processes beside the jobs")
    parser.add_argument("--jobs", default="demo,ddp", help="comma list of: " + ", ".join(JOBS))
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--dslaunch-args", default="", help="extra dslaunch options, space separated")
    args = parser.parse_args()
    jobs = [j for j in args.jobs.split(",") if j]
    unknown = [j for j in jobs if j not in JOBS]
    if unknown:
        parser.error(f"unknown job(s) {unknown}; choose from {sorted(JOBS)}")
    import torch  # only for the report line

    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for hog in hogs:
        hog.start()
    print(
        f"torch {torch.__version__}, python {sys.version.split()[0]}, {args.runs} runs of {jobs}, "
        f"{args.load} busy process(es) beside",
        flush=True,
    )
    failures: dict[str, int] = dict.fromkeys(jobs, 0)
    seconds: dict[str, float] = dict.fromkeys(jobs, 0.0)
    try:
        for i in range(1, args.runs + 1):
            for job in jobs:
                code, err, took = run_once(job, args.dslaunch_args.split(), args.timeout)
                seconds[job] += took
                if code != 0:
                    failures[job] += 1
                    tail = "\n    ".join(err.strip().splitlines()[-8:])
                    print(f"run {i} {job}: exit {code} after {took:.1f} s\n    {tail}", flush=True)
            if i % 10 == 0:
                print(f"... {i} runs, failures so far {failures}", flush=True)
    finally:
        for hog in hogs:
            hog.kill()
    for job in jobs:
        rate = 100.0 * failures[job] / args.runs
        print(
            f"{job}: {failures[job]} failed of {args.runs} ({rate:.1f} per 100), "
            f"mean {seconds[job] / args.runs:.1f} s per run"
        )
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
