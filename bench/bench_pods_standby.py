"""A lost pod, and a warm standby takes its place (issue 30): one elastic job (torchrun's c10d shape, PET_* alone)
of 2 pods x 2 gloo ranks on loopback, plus a third pod that stands by; node 1's pod is deleted; time until every rank
of the next attempt is past ``init_process_group``, against one ``import torch`` timed in the same run.

    python bench/bench_pods_standby.py [--repeat 3] [--imports 3] [--write docs/benchmarks.md]

Three launchers are started 0.4 s apart with ``--max-restarts 1 --restart-delay 0`` (the first coordinates, the
second runs node 1, the third stands by); "warm" adds ``--preload torch``: every pod, the standby too, keeps a
zygote that has imported torch, and ranks are forked from it. "cold" does not: the standby's ranks (and pod 0's)
start a fresh interpreter and import torch after the loss. Each rank is ``bench/pod_standby_rank.py DIR``.
Once all four ranks of attempt 1 are ready and the standby has said it stands by, the pod running node 1 (ranks
2 and 3; usually the second started, but under load the third can join first and the second stand by) is
deleted (SIGKILL to its launcher's process group and to every process under it); the clock starts just before.
The figure is the latest of the four ranks' ``time.time()`` right after ``init_process_group`` returned in
attempt 2. Between rounds, ``python -c "import torch"`` is timed (wall) --imports times; the ratio uses its median.
A script, not a test: the machine is shared and noisy; the load average is printed with the figures.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.bench_pods import delete_pod, free_port_pair, gone, tree
from bench.docblock import write_block

RANK = str(Path(__file__).resolve().parent / "pod_standby_rank.py")
MODES = {"warm": ["--preload", "torch"], "cold": []}
WORLD = 4  # 2 pods x 2 ranks
TARGET = 0.5  # issue 30: at most half of one `import torch`
MARK = "BENCH_PODS_STANDBY"  # in every pod's environment, so every process of the round can be found


@dataclass
class Round:
    """One round: seconds from the deletion (None: not within the timeout), and what the ranks said."""

    past: float | None = None  # the last rank of attempt 2 past init_process_group
    started: float | None = None  # the last rank of attempt 2 running the script's first line
    warm: list[bool] = field(default_factory=list)  # per rank: torch imported before the script ran
    worlds: set[str] = field(default_factory=set)
    pods: list[str] = field(default_factory=list)  # per rank: the role of the pod it ran on
    standby: int = -1  # the pod that stood by, in start order from 0
    codes: list[int | None] = field(default_factory=list)  # pod 0 and the standby
    left: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the pods' "dslaunch: warning" lines
    why: str = ""  # set when the round never got to the figure


def time_imports(count: int) -> list[float]:
    """Wall seconds of ``python -c "import torch"``, ``count`` times."""
    times = []
    for _ in range(count):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
        times.append(time.perf_counter() - start)
    return times


def start_pods(folder: Path, run_id: str, extra: list[str]) -> list[subprocess.Popen[bytes]]:
    """Three pods, in order: the first takes the endpoint's port and coordinates, the third stands by."""
    port = free_port_pair()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DSLAUNCH_"))}
    env.update(
        PET_NNODES="2",
        PET_NPROC_PER_NODE="2",
        PET_RDZV_BACKEND="c10d",
        PET_RDZV_ENDPOINT=f"127.0.0.1:{port + 1}",
        PET_MASTER_PORT=str(port),
        PET_RDZV_ID=run_id,
        PET_RDZV_CONF="join_timeout=30",
        DSLAUNCH_JOB_SECRET=f"bench-standby-{run_id}",
        CUDA_VISIBLE_DEVICES="",
        **{MARK: run_id},
    )
    argv = [sys.executable, "-m", "dslaunch", "--shutdown-timeout", "2", "--max-restarts", "1"]
    argv += ["--restart-delay", "0", *extra, RANK, str(folder)]
    pods = []
    for pod in range(3):
        with open(folder / f"pod{pod}.log", "wb") as log:
            pods.append(
                subprocess.Popen(
                    argv,
                    env={**env, "BENCH_POD": str(pod)},
                    cwd=folder,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
        time.sleep(0.4)
    return pods


def wait_for(
    check: Callable[[], bool], pods: list[subprocess.Popen[bytes]], timeout: float, poll: float = 0.05
) -> bool:
    """Poll ``check()`` until true; False if a pod ended or the time ran out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(p.poll() is None for p in pods):
        if check():
            return True
        time.sleep(poll)
    return False


def roles(folder: Path) -> dict[int, str] | None:
    """Pod (in start order) -> its role, once every rank of attempt 1 is ready and one pod said it stands by.
    Not assumed from the start order: under load the third pod can join before the second."""
    try:
        ready = {r: int((folder / f"ready.{r}").read_text().split()[1]) for r in range(WORLD)}
    except OSError:
        return None
    standby = [pod for pod in range(3) if "this pod stands by" in _log(folder, pod)]
    if len(standby) != 1 or len({ready[0], ready[2], standby[0]}) != 3:
        return None
    return {ready[0]: "coordinator", ready[2]: "node 1", standby[0]: "standby"}


def _log(folder: Path, pod: int) -> str:
    return (folder / f"pod{pod}.log").read_text(errors="replace")


def one_round(extra: list[str], folder: Path, timeout: float) -> Round:
    folder.mkdir(parents=True)
    run_id = f"benchstandby{os.getpid()}{folder.name}"
    pods = start_pods(folder, run_id, extra)
    known: list[psutil.Process] = []
    try:
        if not wait_for(lambda: roles(folder) is not None, pods, 90):
            return Round(why=f"did not start: {_tail(folder)}")
        role = roles(folder) or {}
        by_role = {name: pod for pod, name in role.items()}
        survivors = [pods[by_role["coordinator"]], pods[by_role["standby"]]]
        known = [p for pod in pods for p in tree(pod.pid)]
        t0 = time.time()
        delete_pod(pods[by_role["node 1"]])
        done = wait_for(lambda: all((folder / f"past.{r}").exists() for r in range(WORLD)), survivors, timeout, 0.01)
        lines = [(folder / f"past.{r}").read_text().split() for r in range(WORLD) if done]
        result = Round(why="" if done else f"attempt 2 not past init in {timeout:.0f} s: {_tail(folder)}")
        if done:
            result.past = max(float(line[0]) for line in lines) - t0
            result.started = max(float(line[5]) for line in lines) - t0
            result.warm = [line[1] == "True" for line in lines]
            result.worlds = {line[2] for line in lines}
            result.pods = [role.get(int(line[3]), line[3]) for line in lines]
        result.standby = by_role["standby"]
        for pod in survivors:
            try:
                result.codes.append(pod.wait(30))
            except subprocess.TimeoutExpired:
                result.codes.append(None)
        result.left = leftovers(run_id, known) if None not in result.codes else []
        result.warnings = [s for p in range(3) for s in _log(folder, p).splitlines() if "dslaunch: warning" in s]
        return result
    finally:
        cleanup(pods, known, run_id)


def round_processes(run_id: str) -> list[psutil.Process]:
    """Live processes of the round: those whose environment carries the round's mark."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and not gone(proc) and proc.environ().get(MARK) == run_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def leftovers(run_id: str, known: list[psutil.Process], wait: float = 5) -> list[str]:
    """The round's processes still alive ``wait`` s after the surviving pods exited."""
    deadline = time.monotonic() + wait
    while True:
        alive = [p for p in known if not gone(p)]
        alive += [p for p in round_processes(run_id) if p not in alive]
        if not alive or time.monotonic() > deadline:
            return [f"{p.pid} {' '.join(_cmdline(p))[:120]}" for p in alive]
        time.sleep(0.1)


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return ["?"]


def cleanup(pods: list[subprocess.Popen[bytes]], known: list[psutil.Process], run_id: str) -> None:
    """Kill whatever of the round is left: every pod's process group, everything seen under them, any marked."""
    for pod in pods:
        known = known + tree(pod.pid)
        try:
            os.killpg(pod.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in [*known, *round_processes(run_id)]:
        try:
            proc.kill()  # psutil checks the pid was not reused
        except psutil.Error:
            pass
    for pod in pods:
        pod.wait()


def _tail(folder: Path) -> str:
    """Each pod's last line of output (an error's last line is its message)."""
    lasts = []
    for pod in range(3):
        lines = _log(folder, pod).strip().splitlines()
        lasts.append(f"pod {pod}: {lines[-1][-150:] if lines else 'no output'}")
    return "; ".join(lasts)


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f} s"


def _row(mode: str, rounds: list[Round], imported: float) -> str:
    ran = [r for r in rounds if not r.why]
    past = [r.past for r in ran if r.past is not None]
    started = [r.started for r in ran if r.started is not None]
    forked = f"{sum(sum(r.warm) for r in ran)} of {WORLD * len(ran)}"
    worlds = ", ".join(sorted({w for r in ran for w in r.worlds})) or "-"
    where = "; ".join(sorted({", ".join(r.pods) for r in ran})) or "-"
    codes = ", ".join(sorted({str(r.codes) for r in ran})) or "-"
    left = sum(len(r.left) for r in ran)
    ratio = f"{statistics.median(past) / imported:.2f}x" if past else "-"
    whys = [r.why for r in rounds if r.why]
    note = f"; {len(whys)} round(s) failed: {'; '.join(whys)}" if whys else ""
    return (
        f"| {mode} (`{' '.join(MODES[mode]) or 'no --preload'}`) | {_spread(started)} | {_spread(past)}{note} | "
        f"{ratio} | {forked} | {worlds} | {where} | {codes} | {left} processes |"
    )


def table(args: argparse.Namespace, results: dict[str, list[Round]], imports: list[float], load: float) -> str:
    imported = statistics.median(imports)
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load:.1f} before, {os.getloadavg()[0]:.1f} after (other jobs shared the machine), Python "
        f"{sys.version.split()[0]}, {args.repeat} interleaved rounds (min / median / max). One elastic job of "
        "2 pods x 2 gloo ranks on loopback and a third pod standing by; the pod of node 1 deleted (SIGKILL to "
        "all of it); time from the kill until the last rank of the next attempt started, and until all four were past "
        f'`init_process_group`. `python -c "import torch"` in the same run: {_spread(imports)} '
        f"({len(imports)} runs), median {imported:.3f} s:",
        "",
        "| mode | last rank of attempt 2 started | all 4 past `init_process_group` | median / import torch "
        "| ranks forked warm | WORLD_SIZE | pods of ranks 0-3 | exit codes (coordinator, standby) | left behind |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [_row(mode, rounds, imported) for mode, rounds in results.items()]
    warm = [r.past for r in results.get("warm", []) if r.past is not None]
    if warm:
        ratio = statistics.median(warm) / imported
        verdict = "met" if ratio <= TARGET else "**missed**"
        lines += ["", f"warm, median / import torch: {ratio:.2f}x against the target {TARGET}x: {verdict}"]
    order = [r.standby for rounds in results.values() for r in rounds if not r.why]
    if order:
        second = order.count(1)
        why = f"; in {second}, the third joined first (load) and the second stood by" if second else ""
        lines += ["", f"The pod that stood by was the third started in {order.count(2)} of {len(order)} rounds{why}."]
    warnings = sorted({w for rounds in results.values() for r in rounds for w in r.warnings})
    lines += [f"\nwarning seen: {w}" for w in warnings]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--imports", type=int, default=3, help="`import torch` timings before each round")
    parser.add_argument("--timeout", type=float, default=60, help="seconds for attempt 2 to get past init")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--write", help="write the markdown table into this file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-standby-"))
    load = os.getloadavg()[0]
    results: dict[str, list[Round]] = {mode: [] for mode in args.modes.split(",")}
    imports: list[float] = []
    try:
        for i in range(args.repeat):
            imports += time_imports(args.imports)
            order = list(results) if i % 2 == 0 else list(results)[::-1]  # interleaved, alternating first
            for mode in order:
                result = one_round(MODES[mode], tmp / f"{mode}{i}", args.timeout)
                results[mode].append(result)
                print(f"{mode}: {result}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = table(args, results, imports, load)
    print(text)
    if args.write:
        write_block(Path(args.write), "bench_pods_standby", text)


if __name__ == "__main__":
    main()
