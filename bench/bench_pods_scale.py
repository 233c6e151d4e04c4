"""Pods at scale (issue 54): one real coordinator and thousands of simulated member pods on loopback.

    python -m bench.bench_pods_scale --pods 256,1024 [--runs 3] [--scenarios join,quiet,drop,silent,restart,stop,
        standby,slurm,dialback] [--soak 600] [--results FILE] [--write docs/scale.md]

The coordinator is real: a ``dslaunch`` launcher started as pod 0 of a job configured by PET_* alone, as Kubeflow
configures torchrun (``--no-python sleep`` ranks, ``--ranks`` of them, as many as each simulated pod says it
runs). The member pods are simulated, many per process (``--workers`` processes, each one selectors loop over
thousands of non-blocking sockets, from a loopback address of its own), each saying on the wire what a real
member pod's launcher says, with the project's own code (bench/pods_scale/client.py): the hello, the answer with
the pod's shape, the welcome's check, every line sealed (``channel.link.Sealer``), a heartbeat each ``HEARTBEAT``,
``Spawned`` per rank at each start, the ranks' exits and ``Done`` at a stop, a ``StopStep`` proposal at a requested
stop; and it retries and gives up as ``pods/member.join`` does.

One fixed job per pod count and run, its scenarios in turn (each a function in bench/pods_scale/scenarios.py):
``join`` all joined (from the last pod's first try to the attempt started on every pod) and connection tries;
``quiet`` the coordinator's CPU over ``--quiet-window`` s, its threads and RSS, the simulator's CPU; ``drop`` a pod's
connection closed: until every other pod has the coordinator's NodeLost, then the pod recreated and the job's next
attempt on every pod; ``silent`` the same for a pod that stops sending; ``restart`` the coordinator killed and
started again: until every pod runs the next attempt with the new one; ``stop`` SIGTERM to the coordinator: until
every pod has the job's stop step. Apart: ``standby`` an elastic job (``--nnodes N``, c10d) with one pod more, a
running pod lost: until the next attempt runs on every pod, the standby among them; ``slurm`` Slurm's stop channel,
``--slurm-tasks`` tasks against a real node-0 Hub (in a process of its own: a 4,096-task srun step is more than
this machine's test bed runs); ``dialback`` ``--dial-agents`` agents joining the real dial-back listener under a
flood of ``--flood`` idle connections without the secret; ``--soak S`` S seconds of a running job under 2 busy
loops, counting pods taken as lost. Every wait is bounded; a coordinator (or server) whose threads pass
``--max-threads`` is stopped (a thread-per-pod coordinator at 16,384 pods would take the machine's pids); every
process is killed at the end, Ctrl-C included. Only 127.0.0.0/8. A script, not a test: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block
from bench.pods_scale import channels, scenarios
from bench.pods_scale.coordinator import Coordinator, Job, free_port_pair, load_average
from bench.pods_scale.fleet import Fleet
from bench.pods_scale.worker import raise_nofile
from dslaunch.channel.link import server_silent

ROOT = Path(__file__).resolve().parents[1]
POD_SCENARIOS = ("join", "quiet", "drop", "silent", "restart", "stop")
ALL = (*POD_SCENARIOS, "standby", "realjoin", "slurm", "dialback")
EXTRA = ("churn",)  # only when named: minutes at 16,384 pods
REAL_JOIN_MAX = 2048  # threads of real clients in one process: past this, the check itself is the bottleneck
SECRET = "bench-pods-scale-secret"


def _sim(job: Job, folder: Path, args: argparse.Namespace, members: list[tuple[int, str, int]]) -> scenarios.Sim:
    coordinator = Coordinator(job, folder)
    if not coordinator.wait_listening(60):
        coordinator.kill()
        raise scenarios.Abort(f"the coordinator did not listen: {coordinator.tail(600)}")
    cfg: dict[str, Any] = {"address": job.address, "key": SECRET.encode(), "run_id": job.run_id, "shape": job.shape()}
    cfg.update(ranks_per_pod=job.ranks, max_restarts=job.max_restarts, check=args.check, join_timeout=job.join_timeout)
    cfg["step_time"] = args.step_time
    cfg["silent"] = server_silent(job.pods)  # how long a pod waits for the coordinator (pods/member.join)
    workers = args.workers or max(2, -(-len(members) // 4096))
    fleet = Fleet(workers, cfg)
    fleet.add("pod", args.pod_dialect, members)
    return scenarios.Sim(job, folder, fleet, coordinator, [m[0] for m in members], args.max_threads, args.spread)


def _job(pods: int, args: argparse.Namespace, *, elastic: bool = False, max_restarts: int = 10) -> Job:
    run_id = f"podscale{uuid.uuid4().hex[:8]}"
    return Job(
        pods,
        args.ranks,
        free_port_pair(),
        run_id,
        SECRET,
        elastic=elastic,
        max_restarts=max_restarts,
        join_timeout=args.join_timeout,
    )


def run_fixed(pods: int, args: argparse.Namespace, folder: Path, wanted: set[str]) -> dict[str, Any]:
    """Fixed jobs of ``pods`` pods, the scenarios wanted in turn on one job while every pod runs it; after a scenario
    that leaves the job not running on every pod, the next ones on a fresh job."""
    figures: dict[str, Any] = {}
    notes: list[str] = []
    steps: list[tuple[str, Callable[[scenarios.Sim], bool]]] = [
        ("quiet", lambda sim: scenarios.quiet(sim, args.settle, args.quiet_window)),
        ("drop", lambda sim: scenarios.dropped(sim, args.restart_wait)),
        ("silent", lambda sim: scenarios.silent(sim, args.restart_wait)),
        ("restart", lambda sim: scenarios.coordinator_restarted(sim, args.restart_wait)),
        ("stop", lambda sim: scenarios.requested_stop(sim, args.settle)),
    ]
    sim = _joined_job(pods, args, folder, figures, notes, first=True)
    try:
        if sim is not None and args.soak:
            scenarios.soak(sim, args.soak)
        for name, step in [(n, f) for n, f in steps if n in wanted]:
            if sim is None and "joined" in figures and figures["joined"] == pods - 1:
                notes.append(f"{name}: on a fresh job")
                sim = _joined_job(pods, args, folder, figures, notes, first=False)
            if sim is None:
                break
            if not step(sim):
                figures["summary"] = _plain(sim.fleet.summary())
                _end(sim)
                sim = None
    except scenarios.Abort as exc:
        notes.append(f"aborted: {exc}")
    finally:
        if sim is not None:
            figures["summary"] = _plain(sim.fleet.summary())
            _end(sim)
    return {**figures, "notes": notes}


def _joined_job(
    pods: int, args: argparse.Namespace, folder: Path, figures: dict[str, Any], notes: list[str], *, first: bool
) -> scenarios.Sim | None:
    """A fixed job with every pod running its first attempt; None (ended) when they do not all join."""
    members = [(n, args.host_format.format(n), n) for n in range(1, pods)]
    sim = _sim(_job(pods, args), folder, args, members)
    sim.figures, sim.notes = (figures, notes) if first else ({}, notes)
    try:
        scenarios.start_members(sim)
        if scenarios.joined(sim, args.join_wait):
            sim.figures = figures
            return sim
        if first:
            figures["summary"] = _plain(sim.fleet.summary())
    except scenarios.Abort as exc:
        notes.append(f"aborted: {exc}")
    _end(sim)
    return None


def _end(sim: scenarios.Sim) -> None:
    sim.fleet.close()
    sim.coordinator.kill()


def _with_standby(
    pods: int,
    args: argparse.Namespace,
    folder: Path,
    name: str,
    scenario: Callable[[scenarios.Sim], None],
    *,
    max_restarts: int = 10,
) -> dict[str, Any]:
    """An elastic job of ``pods`` pods and one standby, ``scenario`` on it: the figures and notes named ``name``."""
    job = _job(pods, args, elastic=True, max_restarts=max_restarts)
    members = [(n, args.host_format.format(n), -1) for n in range(1, pods + 1)]  # one more than the job runs
    sim = _sim(job, folder, args, members)
    try:
        scenarios.start_members(sim)
        scenario(sim)
    except scenarios.Abort as exc:
        sim.notes.append(f"aborted: {exc}")
    finally:
        _end(sim)
    return {k: v for k, v in sim.figures.items() if k.startswith(name)} | {f"{name}_notes": sim.notes}


def run_standby(pods: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    return _with_standby(pods, args, folder, "standby", lambda sim: scenarios.standby(sim, args.join_wait))


def run_churn(pods: int, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    def churn(sim: scenarios.Sim) -> None:
        scenarios.churn(sim, args.churn_cycles, args.join_wait)

    return _with_standby(pods, args, folder, "churn", churn, max_restarts=args.churn_cycles + 1)


def run_real_join(pods: int, args: argparse.Namespace) -> dict[str, Any]:
    """The real client (pods/member.join, a thread a pod) at the same size and start: who joins, who gives up."""
    argv = [sys.executable, "-m", "bench.pods_scale.real_join", str(pods), str(args.join_wait)]
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=args.join_wait + 90)
    except subprocess.TimeoutExpired:
        return {"real_outcomes": {"the check timed out": pods - 1}}
    lines = done.stdout.strip().splitlines()
    return json.loads(lines[-1]) if done.returncode == 0 and lines else {"real_outcomes": {done.stderr[-300:]: 0}}


def _plain(value: Any) -> Any:
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, dict) else value


# ---- the table --------------------------------------------------------------------------------------------------
def _median(runs: list[dict[str, Any]], key: str, unit: str = "") -> str:
    """The median over the runs that reached it; which did not, said."""
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    if not values:
        return "-" if not any(key in r for r in runs) else "**not reached**"
    mid = statistics.median(values)
    if all(isinstance(v, int) for v in values) and float(mid).is_integer():
        text = f"{int(mid):,}{unit}"
    else:
        text = f"{mid:,.0f}{unit}" if unit in ("", " MB") and mid >= 10 else f"{mid:,.2f}{unit}"
    return text if len(values) == len(runs) else f"{text} ({len(values)} of {len(runs)} runs)"


COLUMNS = (  # (heading, key, unit): the medians of the pods' runs, by pod count
    ("all joined", "joined_s", " s"),
    ("tries a pod", "tries_per_pod", ""),
    ("quiet CPU (% of a core)", "quiet_cpu_pct", "%"),
    ("threads", "threads", ""),
    ("RSS", "rss_mb", " MB"),
    ("taken as lost while quiet", "quiet_losses", ""),
    ("a dropped pod told to all", "drop_told_s", " s"),
    ("the job again on every pod", "drop_restart_s", " s"),
    ("a silent pod noticed by all", "silent_told_s", " s"),
    ("a requested stop agreed", "stop_agreed_s", " s"),
    ("a standby in place", "standby_s", " s"),
    ("coordinator restarted, pods rejoined", "coordinator_restart_s", " s"),
)


def table(results: dict[str, Any]) -> str:
    """The pods' figures by pod count, the other channels' below, and when and how they were measured."""
    runs_all = [r for kind in results.values() for runs in kind.values() for r in runs]
    loads = sorted(float(r["load"].split()[0]) for r in runs_all if r.get("load"))
    said = sorted({r.get("setup", "") for r in runs_all} - {""})
    when = max((r.get("when", "") for r in runs_all), default="")
    head = f"Measured {when} UTC on 2 cores"
    head += f", load average {loads[0]:g} to {loads[-1]:g} at the runs' ends" if loads else ""
    head += f"; {'; '.join(said)}." if said else "."
    rows = ["| pods | " + " | ".join(c[0] for c in COLUMNS) + " | runs |", "|" + "---|" * (len(COLUMNS) + 2)]
    for size, runs in sorted(results.get("pods", {}).items(), key=lambda kv: int(kv[0])):
        cells = " | ".join(_median(runs, key, unit) for _h, key, unit in COLUMNS)
        rows.append(f"| {int(size):,} | {cells} | {len(runs)} |")
    lines = [head, "\n".join(rows)] if len(rows) > 2 else [head]
    for size, runs in sorted(results.get("slurm", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"- Slurm's stop channel, {int(size):,} tasks: connected {_median(runs, 'connected')} in "
            f"{_median(runs, 'connected_s', ' s')}, a step agreed by all in {_median(runs, 'agreed_s', ' s')}; "
            f"the hub's threads {_median(runs, 'threads_peak')} ({len(runs)} runs)"
        )
    for size, runs in sorted(results.get("churn", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(_churn_line(int(size), runs))
    for size, runs in sorted(results.get("dialback", {}).items(), key=lambda kv: int(kv[0])):
        lines.append(
            f"- the dial-back, {int(size):,} agents under a flood of {_median(runs, 'flood')}: joined "
            f"{_median(runs, 'joined')} in {_median(runs, 'joined_s', ' s')}; the listener's threads "
            f"{_median(runs, 'threads_peak')} ({len(runs)} runs)"
        )
    return "\n\n".join(lines)


def _churn_line(size: int, runs: list[dict[str, Any]]) -> str:
    """Churn at ``size`` pods: the swaps and the coordinator after the first and the last of them (each run's)."""
    ends = [
        f"{r['churn_first'][0]:.0f} -> {r['churn_last'][0]:.0f} MB, threads {r['churn_first'][1]} -> "
        f"{r['churn_last'][1]}, open files {r['churn_first'][2]:,} -> {r['churn_last'][2]:,}"
        for r in runs
        if r.get("churn_first") and r.get("churn_last")
    ]
    return (
        f"- churn, an elastic job of {size:,} pods and one standby: {_median(runs, 'churn_swaps')} running "
        f"pods lost in turn, the standby running in their place in {_median(runs, 'churn_swap_s', ' s')} (slowest "
        f"{_median(runs, 'churn_swap_max_s', ' s')}; tries a pod {_median(runs, 'churn_tries')}, at most "
        f"{_median(runs, 'churn_tries_max')}), the lost pod recreated as the next standby; the coordinator "
        f"after the first swap and after the last: {'; '.join(ends) or 'not reached'} ({len(runs)} runs)"
    )


# ---- the run ----------------------------------------------------------------------------------------------------
def _stop_on_term(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


SETUP = ""  # what the runs were measured on and with, for the table


def _setup(args: argparse.Namespace) -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    options = f"pods: {args.pod_dialect}, {args.ranks} ranks, hosts {args.host_format!r}"
    options += f", started over {args.spread:g} s" if args.spread else ", started at once"
    return f"dslaunch {done.stdout.strip() or '?'}, {options}" + (f", nice {args.nice}" if args.nice else "")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add = parser.add_argument
    add("--pods", default="256,1024", help="pod counts (the coordinator is one of them), comma-separated")
    add("--runs", type=int, default=3)
    add("--scenarios", default=",".join(ALL), help=f"of {','.join(ALL + EXTRA)}")
    add("--churn-cycles", type=int, default=20, help="churn: running pods lost, a standby swapped in each time")
    add("--ranks", type=int, default=8, help="ranks per pod")
    add("--workers", type=int, default=0, help="simulator processes (default: one per 4,096 pods, 2 at least)")
    add("--join-wait", type=float, default=60.0, help="how long the benchmark waits for every pod to run")
    add("--join-timeout", type=float, default=120.0, help="the job's join_timeout (the pods' too)")
    add("--restart-wait", type=float, default=60.0, help="how long for the job to run again on every pod")
    add("--settle", type=float, default=3.0, help="after the start, before the quiet window and the stop")
    add("--quiet-window", type=float, default=10.0)
    add("--soak", type=float, default=0.0, help="seconds of a running job under 2 busy loops (before the scenarios)")
    add("--slurm-tasks", type=int, default=4096)
    add("--dial-agents", type=int, default=1024)
    add("--flood", type=int, default=5000)
    add("--dial-dialect", default="dial-channel", choices=("dial-challenge-first", "dial-channel"))
    add("--max-threads", type=int, default=10000, help="stop a coordinator or server past this many threads")
    add(
        "--pod-dialect",
        default="pod",
        choices=("pod", "pod-retry"),
        help="pod: as pods/member.join; pod-retry: retries",
    )
    add("--spread", type=float, default=0.0, help="the pods start over this many seconds (0: all at once)")
    add("--step-time", type=float, default=2.0, help="from a pod's stop step to its ranks' exits (they reach it)")
    add("--nice", type=int, default=0, help="run everything of the benchmark at this nice value (as root: < 0)")
    add("--host-format", default="job-worker-{}", help="a pod's host name (Kubeflow's pods: JOB-worker-N)")
    add("--check", action="store_true", help="pods check every relayed event with their real decoder")
    add("--results", default=str(Path(tempfile.gettempdir()) / "dslaunch-bench-pods-scale.json"))
    add("--fresh", action="store_true", help="forget the runs already in --results")
    add("--write", default=None, help="put the table into this page (block bench_pods_scale)")
    return parser


def _one_run(args: argparse.Namespace, wanted: set[str], folder: Path, results: dict[str, Any], path: Path) -> None:
    for size in [int(s) for s in args.pods.split(",") if s]:
        got: dict[str, Any] = {}
        if wanted & set(POD_SCENARIOS) or args.soak:
            got = run_fixed(size, args, folder, wanted)
        if "standby" in wanted:
            got |= run_standby(size, args, folder)
        if "churn" in wanted:
            _keep(results, "churn", size, run_churn(size, args, folder), path)
        if "realjoin" in wanted and size <= REAL_JOIN_MAX:
            got |= run_real_join(size, args)
        if got:
            _keep(results, "pods", size, got, path)
    workers = args.workers or 2
    if "slurm" in wanted:
        _keep(
            results,
            "slurm",
            args.slurm_tasks,
            channels.slurm_stop_channel(args.slurm_tasks, workers, args.max_threads),
            path,
        )
    if "dialback" in wanted:
        got = channels.dial_back(args.dial_agents, args.flood, args.dial_dialect, workers, args.max_threads)
        _keep(results, "dialback", args.dial_agents, got, path)


def main() -> None:
    args = _parser().parse_args()
    global SETUP
    SETUP = _setup(args)
    wanted = set(args.scenarios.split(","))
    signal.signal(signal.SIGTERM, _stop_on_term)
    if args.nice:  # the coordinator, the simulator, the servers and the soak's busy loops alike: apart from other work
        os.nice(args.nice)
    raise_nofile()  # the coordinator inherits it, as a pod's container has a high one
    from dslaunch.oslib import prctl

    prctl.load()
    path = Path(args.results)
    results: dict[str, Any] = {} if args.fresh or not path.exists() else json.loads(path.read_text())
    folder = Path(tempfile.mkdtemp(prefix="bench-pods-scale-"))
    print(f"load average {load_average()}; logs in {folder}", flush=True)
    try:
        for run in range(args.runs):
            _one_run(args, wanted, folder, results, path)
            print(f"run {run + 1} of {args.runs} done; load average {load_average()}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: every process is being killed", flush=True)
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(folder, ignore_errors=True)
    text = table(results)
    print(text)
    if args.write:
        write_block(Path(args.write), "bench_pods_scale", text)


def _keep(results: dict[str, Any], kind: str, size: int, got: dict[str, Any], path: Path) -> None:
    got["load"] = load_average()
    got["setup"] = SETUP
    got["when"] = time.strftime("%Y-%m-%d %H:%M:%S")
    results.setdefault(kind, {}).setdefault(str(size), []).append(got)
    path.write_text(json.dumps(results, indent=1, default=str))
    print(f"{kind} {size}: {json.dumps(got, default=str)}", flush=True)


if __name__ == "__main__":
    main()
