"""What ``dslaunch.should_stop()`` costs a rank, and how soon a stop is agreed.

    python -m bench.bench_should_stop [--calls 1000000] [--repeat 7] [--rounds 5] [--write docs/stopping.md]

Run from the repository root as a module.

- per call: ``--calls`` calls in a loop, ``--repeat`` times; the median per call in µs, beside an empty Python
  function call, with the stop page of a real ``StopPages`` (no stop requested: the case of every step but the
  last), through ``dslaunch.should_stop()`` and the module's own function; and outside dslaunch (no page);
  its share of a 100 ms step;
- agreement: a local job of 4 lockstep ranks (tests/scripts/stop_step_ranks.py, 10 ms steps), SIGTERM to the
  launcher; from the signal to the last rank's True answer, and to the launcher's exit, ``--rounds`` times
  (medians); every round checks that the 4 ranks stopped at one step.
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
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block

ROOT = Path(__file__).resolve().parents[1]
RANKS = ROOT / "tests" / "scripts" / "stop_step_ranks.py"
STEP = 0.1  # the step the goal is stated for: well under 1% of it


def _nothing() -> bool:
    return False


def _per_call(stmt: object, calls: int, repeat: int) -> float:
    """Median seconds per call."""
    timer = timeit.Timer(stmt)  # type: ignore[arg-type]
    return statistics.median(t / calls for t in timer.repeat(repeat=repeat, number=calls))


def per_call(calls: int, repeat: int) -> list[tuple[str, float]]:
    import dslaunch
    from dslaunch.agent.stop_pages import StopPages
    from dslaunch.bootstrap import stop_step

    rows = [("an empty Python function call", _per_call(_nothing, calls, repeat))]
    os.environ.pop(stop_step.ENV, None)
    rows.append(("outside dslaunch (no page)", _per_call(stop_step.should_stop, calls, repeat)))
    with tempfile.TemporaryDirectory() as folder:
        pages = StopPages(folder, [0])
        os.environ.update(pages.env_for(0))
        stop_step._absent, stop_step._page = False, None  # attach afresh, to the page
        rows.append(("`dslaunch.should_stop()`, no stop requested", _per_call(dslaunch.should_stop, calls, repeat)))
        rows.append(("`bootstrap.stop_step.should_stop()`, no stop", _per_call(stop_step.should_stop, calls, repeat)))
        pages.request(time.time() + 3600)
        pages.set_target(1 << 60)
        rows.append(("after the step is known (not reached yet)", _per_call(stop_step.should_stop, calls, repeat)))
        stop_step._page = None
        stop_step._mapped = None
        pages.close()
    return rows


def agreement_round(folder: Path) -> tuple[float, float, str]:
    env = {**os.environ, "OUT_DIR": str(folder), "STEP_TIME": "0.01", "READY_AFTER": "20"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dslaunch", "--nproc-per-node", "4", str(RANKS)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not all((folder / f"ready.{r}").exists() for r in range(4)):
        time.sleep(0.01)
    sent = time.time()
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    ended = time.time()
    steps = {(folder / f"saved.{r}").read_text().strip() for r in range(4)}
    if len(steps) != 1:
        raise SystemExit(f"the ranks saved different steps: {steps}")
    answered = max((folder / f"saved.{r}").stat().st_mtime for r in range(4))
    return answered - sent, ended - sent, steps.pop()


def table(rows: list[tuple[str, float]], rounds: list[tuple[float, float, str]]) -> str:
    lines = ["| `should_stop()` per call | µs | of a 100 ms step |", "|---|---|---|"]
    for name, seconds in rows:
        lines.append(f"| {name} | {seconds * 1e6:.3f} | {seconds / STEP:.6%} |")
    if rounds:
        answer = statistics.median(r[0] for r in rounds)
        end = statistics.median(r[1] for r in rounds)
        lines += [
            "",
            "| local job, 4 lockstep ranks, 10 ms steps, SIGTERM to the launcher | median |",
            "|---|---|",
            f"| to the last rank's True (every rank at one step, {len(rounds)} of {len(rounds)} rounds) "
            f"| {answer * 1e3:.0f} ms |",
            f"| to the launcher's exit | {end * 1e3:.0f} ms |",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", help="a docs page to write the table into (block bench-should-stop)")
    args = parser.parse_args()
    rows = per_call(args.calls, args.repeat)
    rounds = []
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            rounds.append(agreement_round(Path(folder)))
    text = table(rows, rounds)
    print(text)
    if args.write:
        stamp = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
        write_block(
            Path(args.write), "bench-should-stop", f"Measured {stamp} UTC (`bench/bench_should_stop.py`):\n\n{text}"
        )


if __name__ == "__main__":
    main()
