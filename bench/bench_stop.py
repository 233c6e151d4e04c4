"""What a stop costs: SIGTERM to the launcher while 4 ranks train, and how many ranks saved their checkpoint.

    python bench/bench_stop.py [--ranks 4] [--rounds 5] [--launchers dslaunch,torchrun,deepspeed]
                               [--variants handler,should_stop] [--write docs/benchmarks.md]

Each round starts the job (``examples/preempt_handler.py``: a SIGTERM handler sets a flag, the loop finishes the
step, saves and exits 0; ``examples/preempt_should_stop.py``: ``dslaunch.should_stop()`` at the same point each
step, under dslaunch only), waits until every rank has done ``--warm-steps`` steps (a file per rank), sends SIGTERM
to the launcher's pid alone (as the kubelet does to a container's first process, or a node drain), and measures:
the ranks that saved out of N, whether they all saved the same step (a checkpoint that is not torn), the time from
the request until the last rank's process is gone (polled every 20 ms), and the launcher's exit code. A rank still
alive ``--stop-timeout`` seconds after the request is counted as left running, then killed with whatever else the
job left. The launchers alternate within each round. A script, not a test: the machine is shared and noisy.

torchrun runs as ``python -m torch.distributed.run``; DeepSpeed's launcher as ``deepspeed --num_gpus N
--no_local_rank`` with ``DS_ACCELERATOR=cpu`` (it runs on CPU: ``--num_gpus`` sets the slots, not devices).
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
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import free_port, write_block

ROOT = Path(__file__).resolve().parents[1]

BIN = Path(sys.executable).parent
LAUNCHERS = ("dslaunch", "torchrun", "deepspeed")
VARIANTS = {
    "handler": ROOT / "examples" / "preempt_handler.py",
    "should_stop": ROOT / "examples" / "preempt_should_stop.py",
}
START_TIMEOUT = 180.0  # until every rank is past its warm-up steps (DeepSpeed imports itself twice first)
POLL = 0.02


@dataclass(frozen=True)
class Round:
    saved: tuple[int, ...]  # the step each rank that saved saved
    seconds: float | None  # from the request until the last rank was gone; None: some were left running
    code: int | None  # the launcher's exit code; None: it was still running at the time-out
    left: int  # ranks still running --stop-timeout after the request
    worker_killed: bool  # a rank said a DataLoader worker of its was killed (the stop's signal reached it)


def command(launcher: str, n: int, script: Path, out: Path) -> list[str]:
    port = str(free_port())
    args = [str(script), "--out", str(out)]
    if launcher == "dslaunch":
        return [str(BIN / "dslaunch"), "--nproc-per-node", str(n), "--master-port", port, *args]
    if launcher == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n), "--master-port", port, *args]
    return [str(BIN / "deepspeed"), "--num_gpus", str(n), "--master_port", port, "--no_local_rank", *args]


def one_round(launcher: str, script: Path, n: int, out: Path, *, warm: int, stop_timeout: float) -> Round | str:
    """One job stopped by SIGTERM to its launcher: what it came to, or why it could not be measured."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    if launcher == "deepspeed":
        env.pop("CUDA_VISIBLE_DEVICES")  # else DeepSpeed turns it into --include (reference: deepspeed-launcher.md)
    log = open(out / "launcher.log", "wb")  # closed in the finally below
    proc = subprocess.Popen(
        command(launcher, n, script, out), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    tree: list[psutil.Process] = []
    try:
        if not _wait_warm(proc, out, n, warm):
            return _why(proc, out, f"the ranks did not reach step {warm}")
        tree = _descendants(proc.pid)
        ranks = _ranks(tree)
        if len(ranks) != n:
            return f"found {len(ranks)} rank processes, not {n}"
        requested = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        gone_at = _wait_gone(proc, ranks, requested + stop_timeout)
        left = sum(1 for p in ranks if _alive(p))
        code = proc.poll()
        seconds = None if left or gone_at is None else gone_at - requested
        said = (out / "launcher.log").read_text(errors="replace")
        return Round(_saved(out, n), seconds, code, left, "DataLoader worker (pid" in said)
    finally:
        for p in [*tree, *_descendants(proc.pid)]:
            _kill(p)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        log.close()


def _wait_warm(proc: subprocess.Popen[bytes], out: Path, n: int, warm: int) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        if all(_step(out / f"step.{r}") >= warm for r in range(n)):
            return True
        time.sleep(0.1)
    return False


def _step(path: Path) -> int:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return -1


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _ranks(tree: list[psutil.Process]) -> list[psutil.Process]:
    """The ranks: processes with a ``RANK`` in their environment whose parent has none (a rank's DataLoader workers
    inherit it; the launchers' own processes have none)."""
    ranked = {p.pid for p in tree if _rank_of(p) is not None}
    return [p for p in tree if p.pid in ranked and _parent(p) not in ranked]


def _rank_of(p: psutil.Process) -> str | None:
    try:
        return p.environ().get("RANK")
    except psutil.Error:
        return None


def _parent(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(proc: subprocess.Popen[bytes], ranks: list[psutil.Process], deadline: float) -> float | None:
    """When the last rank was seen gone (None: not before ``deadline``); also waits (as long) for the launcher."""
    gone_at = None
    while time.monotonic() < deadline:
        if gone_at is None and not any(_alive(p) for p in ranks):
            gone_at = time.monotonic()
        if gone_at is not None and proc.poll() is not None:
            break
        time.sleep(POLL)
    return gone_at


def _saved(out: Path, n: int) -> tuple[int, ...]:
    return tuple(step for r in range(n) if (step := _step(out / f"saved.{r}")) >= 0)


def _kill(p: psutil.Process) -> None:
    try:
        p.kill()
    except psutil.Error:
        pass


def _why(proc: subprocess.Popen[bytes], out: Path, what: str) -> str:
    lines = [line for line in (out / "launcher.log").read_text(errors="replace").splitlines() if line.strip()]
    last = lines[-1][-200:] if lines else "no output"
    return f"{what} (launcher exit {proc.poll()}): {last}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm-steps", type=int, default=5)
    parser.add_argument("--stop-timeout", type=float, default=45.0)
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--write", help="write the markdown table into this file")
    args = parser.parse_args()
    cases = _cases(args.launchers.split(","), args.variants.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-stop-"))
    load_before = os.getloadavg()[0]
    results: dict[tuple[str, str], list[Round | str]] = {case: [] for case in cases if isinstance(cases[case], Path)}
    for _ in range(args.rounds):
        for case, done in results.items():  # alternating: load changes hit every launcher alike
            script = cases[case]
            assert isinstance(script, Path)
            done.append(
                one_round(
                    case[0], script, args.ranks, tmp / "out", warm=args.warm_steps, stop_timeout=args.stop_timeout
                )
            )
            print(f"{case[0]} {case[1]}: {done[-1]}", file=sys.stderr, flush=True)
    table = _table(args, cases, results, load_before)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_stop", table)
    shutil.rmtree(tmp, ignore_errors=True)


def _cases(launchers: list[str], variants: list[str]) -> dict[tuple[str, str], Path | str]:
    """Each (launcher, variant) to run with its script, or why it is skipped."""
    import dslaunch

    cases: dict[tuple[str, str], Path | str] = {}
    for variant in variants:
        for launcher in launchers:
            if variant == "should_stop" and launcher != "dslaunch":
                continue  # nothing outside dslaunch requests the stop that should_stop() reports
            if variant == "should_stop" and not hasattr(dslaunch, "should_stop"):
                cases[(launcher, variant)] = "skipped: this dslaunch has no dslaunch.should_stop() (issue 38 item 2)"
                print(f"{launcher} {variant}: {cases[(launcher, variant)]}", file=sys.stderr, flush=True)
            else:
                cases[(launcher, variant)] = VARIANTS[variant]
    return cases


def _table(
    args: argparse.Namespace,
    cases: dict[tuple[str, str], Path | str],
    results: dict[tuple[str, str], list[Round | str]],
    load_before: float,
) -> str:
    n = args.ranks
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other jobs shared the machine), Python "
        f"{sys.version.split()[0]}, {args.rounds} rounds, {n} local CPU ranks (gloo), `DataLoader(num_workers=2)`, "
        f"~0.1 s steps; SIGTERM to the launcher's pid once every rank was past step {args.warm_steps}. Time: from "
        "the request until the last rank's process was gone (median, range); a rank alive "
        f"{args.stop_timeout:g} s after the request counts as left running:",
        "",
        "| launcher | rank script | ranks saved | rounds with every rank at one step | request to last rank's exit "
        '| launcher exit | ranks left running | rounds with a "DataLoader worker ... killed" |',
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, script in cases.items():
        if isinstance(script, str):
            lines.append(f"| {case[0]} | `{case[1]}` | {script} | | | | | |")
            continue
        lines.append(_row(case, results[case], n))
    return "\n".join(lines)


def _row(case: tuple[str, str], rounds: list[Round | str], n: int) -> str:
    done = [r for r in rounds if isinstance(r, Round)]
    whys = sorted({r for r in rounds if isinstance(r, str)})
    saved = sum(len(r.saved) for r in done)
    same = sum(1 for r in done if len(r.saved) == n and len(set(r.saved)) == 1)
    times = [r.seconds for r in done if r.seconds is not None]
    took = f"{statistics.median(times):.2f} s ({min(times):.2f}-{max(times):.2f})" if times else "-"
    counts = _count(_code(r.code) for r in done)
    codes = ", ".join(f"{code} x{k}" for code, k in sorted(counts.items()))
    killed = sum(1 for r in done if r.worker_killed)
    left = sum(r.left for r in done)
    failed = f"; {len(rounds) - len(done)} round(s) not measured: {'; '.join(whys)}" if whys else ""
    return (
        f"| {case[0]} | `{case[1]}` | {saved} of {n * len(done)}{failed} | {same} of {len(done)} | {took} "
        f"| {codes or '-'} | {left} | {killed} of {len(done)} |"
    )


def _code(code: int | None) -> str:
    if code is None:
        return "still running"
    return f"killed by {signal.Signals(-code).name}" if code < 0 else str(code)


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return counts


if __name__ == "__main__":
    main()
