"""What seeing a running job costs (issue 40): the job-wide breakdown, straggler detection and metrics.

    python bench/bench_observe.py [--ranks 64] [--nodes 2] [--steps 100] [--rounds 2] [--write docs/benchmarks.md]

Three figures:

- **end to end**: a job of non-torch ranks (``bench/observe_rank.py``: steps of ~100 ms, three timer regions),
  once with nothing observed (``--straggler-factor 0``), once with everything (``--wall-clock-breakdown
  --breakdown-every 20 --metrics-port --metrics-file``), alternating, ``--rounds`` each: every rank's mean step
  wall time, and the whole job's CPU time (launcher, agents, ranks: the children's rusage) per rank-step;
- **a rank's own cost** per step, in process: ``timers.step()`` with and without a window file;
- **the launcher's cost** per rank window, in process: an observer fed every rank's windows.

A script, not a test: the machine is shared and noisy; the in-process figures are the precise ones.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import free_port, write_block

ROOT = Path(__file__).resolve().parents[1]
RANK = str(ROOT / "bench" / "observe_rank.py")
STEP = 0.1


def _job(ranks: int, nodes: int, steps: int, observed: bool, work: Path) -> tuple[float, float]:
    """(mean step wall time over the ranks, CPU seconds of the whole job)."""
    out = Path(tempfile.mkdtemp(dir=work))
    hosts = work / "hosts"
    names = ["localhost", "127.0.0.1", "localhost.localdomain"][:nodes]
    hosts.write_text("".join(f"{h} slots={ranks // nodes}\n" for h in names))
    args = ["--hostfile", str(hosts), "--launcher", "local", "--master-port", "0"]
    if observed:
        args += ["--wall-clock-breakdown", "--breakdown-every", "20", "--metrics-port", f"127.0.0.1:{free_port()}"]
        args += ["--metrics-file", str(out / "job.prom")]
    else:
        args += ["--straggler-factor", "0"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "dslaunch", *args, RANK, str(out), str(steps)],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    means = [float((out / f"rank{r}.txt").read_text()) for r in range(ranks // nodes * nodes)]
    return statistics.mean(means), cpu


def _rank_cost(steps: int = 20000) -> tuple[float, float]:
    """µs per timers.step() with three regions: without, then with a window file."""
    from dslaunch.bootstrap.timers import Timers
    from dslaunch.observe import rank_windows, record

    def run() -> float:
        timers = Timers(enabled=False)
        start = time.perf_counter()
        for _ in range(steps):
            for region in ("forward", "backward", "allreduce"):
                with timers(region):
                    pass
            timers.step()
        return (time.perf_counter() - start) / steps * 1e6

    bare = run()
    with tempfile.NamedTemporaryFile() as f:
        os.ftruncate(f.fileno(), record.FILE_SIZE)
        os.environ[record.ENV_FILE], os.environ[record.ENV_STEPS] = f.name, "5"
        rank_windows._opened, rank_windows._state = False, None
        windowed = run()
    return bare, windowed


def _launcher_cost(ranks: int, windows: int = 200) -> float:
    """µs of the launcher's observer per rank window (breakdown printed to /dev/null, stragglers on)."""
    from dslaunch import wire
    from dslaunch.observe import session
    from dslaunch.observe.settings import ObserveSettings
    from dslaunch.plan import LaunchPlan, NodePlan, Program

    plan = LaunchPlan("local", "b", (NodePlan("h", 0, ("0",) * ranks, tuple(range(ranks))),), "h", 1, Program("x"))
    observer = session.Observer(ObserveSettings(breakdown=False), plan)
    observer.begin(plan)
    events = [
        wire.TimerWindow(0, r, i, i * 5, 5, 0.5, (("forward", 0.3, 0.06), ("backward", 0.15, 0.03)))
        for i in range(1, windows + 1)
        for r in range(ranks)
    ]
    start = time.perf_counter()
    for event in events:
        observer.on_event(event, 0.0)
    return (time.perf_counter() - start) / len(events) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", type=Path)
    a = parser.parse_args()
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(a.rounds):
            for observed in (False, True):
                results[observed].append(_job(a.ranks, a.nodes, a.steps, observed, Path(work)))
    rank_steps = a.ranks * a.steps
    step = {k: statistics.mean(s for s, _ in v) for k, v in results.items()}
    cpu = {k: statistics.mean(c for _, c in v) / rank_steps * 1e6 for k, v in results.items()}
    bare, windowed = _rank_cost()
    per_window = _launcher_cost(a.ranks)
    table = "\n".join(
        [
            f"{a.ranks} non-torch ranks on {a.nodes} local nodes, {a.steps} steps of ~100 ms, {a.rounds} rounds each "
            f"(2-core machine, shared)",
            "",
            "| figure | nothing observed | breakdown + stragglers + metrics | overhead |",
            "|---|---|---|---|",
            f"| mean step wall time | {step[False] * 1e3:.2f} ms | {step[True] * 1e3:.2f} ms | "
            f"{(step[True] / step[False] - 1) * 100:+.2f} % |",
            f"| job CPU per rank-step (launcher, agents, ranks) | {cpu[False]:.0f} µs | {cpu[True]:.0f} µs | "
            f"{(cpu[True] - cpu[False]) / (STEP * 1e6) * 100:+.3f} % of a 100 ms step |",
            f"| a rank's timers.step() (3 regions, in process) | {bare:.1f} µs | {windowed:.1f} µs | "
            f"{(windowed - bare) / (STEP * 1e6) * 100:+.4f} % of a 100 ms step |",
            f"| the launcher per rank window (in process, {a.ranks} ranks) | - | {per_window:.1f} µs | "
            f"{per_window * a.ranks / 5 / (STEP * 1e6) * 100:.3f} % of one core |",
        ]
    )
    print(table)
    if a.write:
        write_block(a.write, "bench_observe", table)


if __name__ == "__main__":
    main()
