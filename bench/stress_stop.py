"""Stop stress check (issue 38): SIGTERM to dslaunch while ranks train with DataLoader-like workers; every rank's
own SIGTERM handler must finish its step and save, every run.

    .venv/bin/python bench/stress_stop.py --runs 50 [--ranks 4] [--load 2] [--torch]

Each run starts ``--ranks`` ranks of ``tests/scripts/stop_saver.py`` (two forked workers each, the rank fails as
PyTorch's DataLoader does when a worker dies by a signal; ``--torch``: ``tests/scripts/stop_dataloader.py``, a real
``DataLoader(num_workers=2)``, under ``--preload torch``), waits until every rank is up, sends SIGTERM to the
launcher and counts the ranks that saved, the exit code (143 wanted) and what is left of the job. ``--load`` adds
that many busy-looping processes beside the jobs. Prints one line per failed run and the totals; exit status 0
when every rank of every run saved.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"


def _burn() -> None:
    while True:
        pass


def one_run(ranks: int, use_torch: bool, grace: float) -> tuple[int, int, float, str]:
    """(ranks saved, exit code, seconds from the SIGTERM to dslaunch's exit, stderr tail)."""
    with tempfile.TemporaryDirectory(prefix="stop-stress-") as out:
        script = SCRIPTS / ("stop_dataloader.py" if use_torch else "stop_saver.py")
        extra = ["--preload", "torch"] if use_torch else []
        rid = "stress" + uuid.uuid4().hex[:8]
        argv = [sys.executable, "-m", "dslaunch", "--nproc-per-node", str(ranks), "--run-id", rid]
        argv += ["--stop-grace", str(grace), *extra, str(script), out]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        deadline = time.monotonic() + 120
        while sum(os.path.exists(os.path.join(out, f"rank{r}.ready")) for r in range(ranks)) < ranks:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                _, err = proc.communicate()
                return 0, proc.returncode, 0.0, "ranks did not start: " + err[-500:]
            time.sleep(0.05)
        time.sleep(0.2)
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=grace + 60)
        took = time.monotonic() - asked
        saved = sum(os.path.exists(os.path.join(out, f"rank{r}.saved")) for r in range(ranks))
        return saved, proc.returncode, took, err[-800:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--load", type=int, default=0, help="busy-looping processes beside the jobs")
    parser.add_argument("--grace", type=float, default=20.0, help="--stop-grace")
    parser.add_argument("--torch", action="store_true", help="a real torch DataLoader, under --preload torch")
    args = parser.parse_args()
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(args.load)]
    for b in burners:
        b.start()
    saved_total, bad_runs, took = 0, 0, []
    try:
        for run in range(args.runs):
            saved, code, seconds, err = one_run(args.ranks, args.torch, args.grace)
            saved_total += saved
            took.append(seconds)
            if saved != args.ranks or code != 143:
                bad_runs += 1
                print(f"run {run + 1}: {saved} of {args.ranks} saved, exit {code}\n{err}", flush=True)
    finally:
        for b in burners:
            b.kill()
    load = os.getloadavg()[0]
    took.sort()
    print(
        f"{saved_total} of {args.runs * args.ranks} ranks saved in {args.runs} runs ({bad_runs} runs failed); "
        f"SIGTERM to exit: median {took[len(took) // 2]:.2f} s, max {took[-1]:.2f} s; "
        f"load average {load:.1f} on {os.cpu_count()} CPUs (--load {args.load})"
    )
    return 0 if bad_runs == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
