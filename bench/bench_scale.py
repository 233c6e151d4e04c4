"""Scale: dslaunch's ssh and pdsh runners on 64/128/256 loopback hosts, beside bare ``pdsh -f N`` in the same run.

    python -m bench.bench_scale --hosts 64 [--rounds 3] [--warm 0] [--only WORDS] [--fresh] [--write PAGE]

Run from the repository root as a module: the sshds (one per 16 loopback addresses, ``testbeds/scale_cluster.py``)
are the dev-only ``testbeds`` ones. A script, not a test; keep one invocation under ~10 minutes (one size at a time
at 256), its runs are appended to ``--results`` and ``--write`` puts the table of every size there into the page.

One rank per host, a shell script (``testbeds.scale_cluster.RANK_SH``) that writes its start time. Each round
runs, interleaved: bare ``pdsh -R ssh -f N true``; bare pdsh starting the agent's interpreter (``python -c 'import
dslaunch.agent.run_node'``, what a node agent costs before it does anything); the ssh and pdsh runners with that trivial
job; then both runners with a job where rank N/2 exits 3 once every rank has started (the others would sleep).
Measured on the launcher process only (sampled from ``/proc`` every 10 ms, its CPU read from its zombie): wall time
to its exit, all ranks started (the last start time), its own CPU seconds and, apart, its children's (pdsh and its
ssh clients), peak RSS (VmHWM), most threads and open fds; for the failing job, the failing rank's exit to the
launcher's exit (fail-fast) and the launcher's exit to no process of the run left (teardown; by run id in the
environment or command line, as tests/conftest.py's sweep finds them). The sshds and agents share this machine's
cores, so wall ratios to bare pdsh in the same round (median over rounds) are the figures, not seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block
from testbeds.scale_cluster import RANK_SH, start_scale_cluster

DSLAUNCH = [sys.executable, "-m", "dslaunch"]
TICK = os.sysconf("SC_CLK_TCK")
BARE, BARE_PY = "pdsh true (baseline)", "pdsh python (agent's interpreter)"
JOBS = ("dslaunch ssh", "dslaunch pdsh")
FAILS = ("ssh: rank fails", "pdsh: rank fails")


class Watch(threading.Thread):
    """The launcher's peak RSS, threads and fds while it runs; its exit time and CPU read from its zombie."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.hwm_kb = self.threads = self.fds = 0
        self.below, self.below_kb = 0, 0  # most descendants at once (pdsh, its ssh clients), their private memory
        self.exited = 0.0
        self.cpu_self = self.cpu_children = 0.0

    def _sample(self) -> None:
        try:
            with open(f"/proc/{self.pid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            self.hwm_kb = max(self.hwm_kb, int(fields.get("VmHWM", "0 kB").split()[0]))
            self.threads = max(self.threads, int(fields.get("Threads", "0")))
            self.fds = max(self.fds, len(os.listdir(f"/proc/{self.pid}/fd")))
        except (OSError, ValueError):
            pass

    def _descendants(self) -> None:
        todo, count, anon = [self.pid], 0, 0
        while todo:
            pid = todo.pop()
            try:
                kids = []
                for task in os.listdir(f"/proc/{pid}/task"):  # children are listed by the thread that forked them
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        kids += [int(k) for k in f.read().split()]
                for kid in kids:
                    with open(f"/proc/{kid}/status") as f:
                        anon += next((int(line.split()[1]) for line in f if line.startswith("RssAnon:")), 0)
            except (OSError, ValueError):
                continue
            count += len(kids)
            todo += kids
        self.below, self.below_kb = max(self.below, count), max(self.below_kb, anon)

    def run(self) -> None:
        for turn in range(1 << 62):
            with open(f"/proc/{self.pid}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            if stat[0] == "Z":
                self.exited = time.time()
                self.cpu_self = (int(stat[11]) + int(stat[12])) / TICK
                self.cpu_children = (int(stat[13]) + int(stat[14])) / TICK
                return
            if turn % 3 == 0:
                self._sample()
            if turn % 30 == 15:
                self._descendants()
            time.sleep(0.01)


def run_procs(run_id: str) -> int:
    """How many live processes carry ``run_id`` in their environment or command line."""
    needle, count = run_id.encode(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f, open(f"/proc/{entry}/cmdline", "rb") as g:
                count += needle in f.read() or needle in g.read()
        except OSError:
            continue
    return count


def _stamps(folder: Path) -> tuple[float, float]:
    """(the last rank's start time, the failing rank's exit time or 0)."""
    starts = [float(p.read_text()) for p in folder.glob("start.*")]
    fail = folder / "fail"
    return max(starts, default=0.0), float(fail.read_text()) if fail.exists() else 0.0


def measure(cmd: list[str], env: dict[str, str], stamps: Path, run_id: str, expect: int) -> dict[str, float]:
    for p in stamps.iterdir():
        p.unlink()
    errors = stamps.parent / "stderr"
    start = time.time()
    with errors.open("wb") as err:  # a file, never a pipe: nothing the launcher says can hold it up
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
    watch = Watch(proc.pid)
    watch.start()
    watch.join(300)
    left, gone = run_procs(run_id), time.time()
    while left and time.time() - gone < 60:
        time.sleep(0.05)
        left = run_procs(run_id)
    teardown = time.time() - watch.exited
    if proc.wait(30) != expect:
        raise SystemExit(f"exit {proc.returncode}, not {expect}: {' '.join(cmd[:10])}...\n{errors.read_text()[-3000:]}")
    started, failed = _stamps(stamps)
    return {
        "wall": watch.exited - start,
        "started": started - start if started else 0.0,
        "fail_fast": watch.exited - failed if failed else 0.0,
        "teardown": teardown,
        "left": left,
        "cpu_self": watch.cpu_self,
        "cpu_children": watch.cpu_children,
        "rss_mb": watch.hwm_kb / 1024,
        "threads": watch.threads,
        "fds": watch.fds,
        "below": watch.below,
        "below_mb": watch.below_kb / 1024,
    }


def cases(cluster: object, tmp: Path, fanout: int | None) -> dict[str, tuple[list[str], dict[str, str], int]]:
    """name -> (argv, environment, expected exit); the run id in each argv is the token RUNID."""
    config, aliases = str(cluster.config), list(cluster.aliases)  # type: ignore[attr-defined]
    n = len(aliases)
    rank = tmp / "rank.sh"
    rank.write_text(RANK_SH)
    rank.chmod(0o755)
    hosts = str(cluster.hostfile(aliases, slots=1, name="hosts-scale"))  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PDSH_", "DSLAUNCH_"))}
    env["STAMPS"] = str(tmp / "stamps")
    pdsh = ["pdsh", "-R", "ssh", "-f", str(n), "-w", ",".join(aliases)]
    bare_env = {**env, "PDSH_SSH_ARGS_APPEND": f"-F {config}"}
    python = f"{sys.executable} -c 'import dslaunch.agent.run_node'"
    common = ["-H", hosts, "--ssh-config", config, "--run-id", "RUNID", "--export", "STAMPS"]
    common += ["--fanout", str(fanout)] if fanout else []
    fail = ["--export", "FAIL_RANK", "--export", "HOLD"]
    fail_env = {**env, "FAIL_RANK": str(n // 2), "HOLD": "120"}
    return {
        BARE: ([*pdsh, "true"], bare_env, 0),
        BARE_PY: ([*pdsh, python], bare_env, 0),
        JOBS[0]: ([*DSLAUNCH, "--launcher", "ssh", *common, "--no-python", str(rank)], env, 0),
        JOBS[1]: ([*DSLAUNCH, "--launcher", "pdsh", *common, "--no-python", str(rank)], env, 0),
        FAILS[0]: ([*DSLAUNCH, "--launcher", "ssh", *common, *fail, "--no-python", str(rank)], fail_env, 3),
        FAILS[1]: ([*DSLAUNCH, "--launcher", "pdsh", *common, *fail, "--no-python", str(rank)], fail_env, 3),
    }


def bench(n: int, rounds: int, warm: int, fanout: int | None, only: str | None) -> dict[str, list[dict[str, float]]]:
    cluster = start_scale_cluster(n)
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-scale-"))
    (tmp / "stamps").mkdir()
    try:
        words = only.split(",") if only else []
        todo = {k: v for k, v in cases(cluster, tmp, fanout).items() if not words or any(w in k for w in words)}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in todo}
        for turn in range(1 - warm, rounds + 1):  # round 0 warms caches and is not kept
            for name, (argv, env, expect) in todo.items():
                run_id = "scale" + uuid.uuid4().hex[:10]
                record = measure([run_id if a == "RUNID" else a for a in argv], env, tmp / "stamps", run_id, expect)
                if turn:
                    runs[name].append(record)
                print(f"{n} hosts, round {turn}: {name}: {record['wall']:.2f} s", file=sys.stderr, flush=True)
        return runs
    finally:
        cluster.stop()
        shutil.rmtree(cluster.base, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


Runs = list[dict[str, float]]
Results = dict[str, dict[str, Runs]]


def _median(runs: Runs, key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in runs)


def _ratio(runs: Runs, base: Runs | None) -> str:
    """Median over rounds of this case's wall over the baseline's in the same round."""
    if not base:
        return "-"
    return f"{statistics.median(r['wall'] / b['wall'] for r, b in zip(runs, base)):.2f}x"


def _slope(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares through (hosts, value): (per host, at zero hosts)."""
    if len(points) < 2:
        return 0.0, points[0][1] if points else 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)
    return slope, my - slope * mx


def _by_size(results: Results) -> list[tuple[str, dict[str, Runs]]]:
    return sorted(results.items(), key=lambda kv: int(kv[0]))


def launch_table(results: Results) -> list[str]:
    rows = [
        "| hosts | command | wall (s) | vs pdsh true | vs pdsh python | all started (s) | launcher CPU (s) "
        "| its children's CPU (s) | peak RSS (MB) | threads | fds | processes under it (private MB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, runs in _by_size(results):
        for name in (x for x in (BARE, BARE_PY, *JOBS) if x in runs):
            r = runs[name]
            started = f"{_median(r, 'started'):.2f}" if name in JOBS else "-"
            rows.append(
                f"| {n} | {name} | {_median(r, 'wall'):.2f} | {_ratio(r, runs.get(BARE))} | "
                f"{_ratio(r, runs.get(BARE_PY))} | {started} | {_median(r, 'cpu_self'):.2f} | "
                f"{_median(r, 'cpu_children'):.2f} | {_median(r, 'rss_mb'):.0f} | {_median(r, 'threads'):.0f} | "
                f"{_median(r, 'fds'):.0f} | {_median(r, 'below'):.0f} ({_median(r, 'below_mb'):.0f}) |"
            )
    return rows


def fail_table(results: Results) -> list[str]:
    rows = [
        "| hosts | job | all started (s) | fail-fast (s, median / worst) | teardown to nothing left (s) "
        "| left after 60 s |",
        "|---|---|---|---|---|---|",
    ]
    for n, runs in _by_size(results):
        for name in (x for x in FAILS if x in runs):
            r = runs[name]
            rows.append(
                f"| {n} | {name} | {_median(r, 'started'):.2f} | {_median(r, 'fail_fast'):.2f} / "
                f"{max(x['fail_fast'] for x in r):.2f} | {_median(r, 'teardown'):.2f} | "
                f"{max(x['left'] for x in r):.0f} |"
            )
    return rows


def slope_table(results: Results) -> list[str]:
    rows = [
        "| command | per host: CPU (ms) | RSS (MB) | threads | fds | processes under it (private MB) | wall (s) "
        "| at 0 hosts: RSS (MB), threads, fds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in (*JOBS, BARE):
        keys = ("cpu_self", "rss_mb", "threads", "fds", "below", "below_mb", "wall")
        sizes = [(int(n), runs[name]) for n, runs in results.items() if name in runs]
        fit = {k: _slope([(n, _median(r, k)) for n, r in sizes]) for k in keys}
        rows.append(
            f"| {name} | {fit['cpu_self'][0] * 1000:.1f} | {fit['rss_mb'][0]:.3f} | {fit['threads'][0]:.2f} | "
            f"{fit['fds'][0]:.2f} | {fit['below'][0]:.2f} ({fit['below_mb'][0]:.2f}) | {fit['wall'][0]:.3f} | "
            f"{fit['rss_mb'][1]:.0f}, {fit['threads'][1]:.0f}, {fit['fds'][1]:.0f} |"
        )
    return rows


def table(results: Results, loads: dict[str, list[float]]) -> str:
    load = ", ".join(f"{n} hosts: {min(v):.1f}-{max(v):.1f}" for n, v in sorted(loads.items(), key=lambda x: int(x[0])))
    head = f"Load average (1 min) at the start and end of each size: {load}; {os.cpu_count()} cores; medians."
    return "\n".join([head, "", *launch_table(results), "", *fail_table(results), "", *slope_table(results)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", default="64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warm", type=int, choices=(0, 1), default=1, help="a first round that is not kept")
    parser.add_argument("--fanout", type=int, default=None, help="dslaunch's --fanout (default: its own)")
    parser.add_argument("--only", default=None, help="run only the cases whose names hold one of these words")
    parser.add_argument("--results", default=str(Path(tempfile.gettempdir()) / "dslaunch-bench-scale.json"))
    parser.add_argument("--fresh", action="store_true", help="forget the runs already in --results")
    parser.add_argument("--write", default=None, help="put the table into this page (block bench_scale)")
    args = parser.parse_args()
    path = Path(args.results)
    saved = {} if args.fresh or not path.exists() else json.loads(path.read_text())
    results, loads = saved.get("results", {}), saved.get("loads", {})
    for n in (int(x) for x in args.hosts.split(",") if x):
        loads.setdefault(str(n), []).append(os.getloadavg()[0])
        for name, runs in bench(n, args.rounds, args.warm, args.fanout, args.only).items():
            results.setdefault(str(n), {}).setdefault(name, []).extend(runs)
        loads[str(n)].append(os.getloadavg()[0])
        path.write_text(json.dumps({"results": results, "loads": loads}, indent=1))
    text = table(results, loads)
    print(text)
    if args.write:
        write_block(Path(args.write), "bench_scale", text)


if __name__ == "__main__":
    main()
