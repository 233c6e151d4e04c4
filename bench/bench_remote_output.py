"""Remote output plane: 2 hosts x 2 ranks over ssh and pdsh, next to bare ssh/pdsh moving the same bytes.

    python -m bench.bench_remote_output [--mb 29] [--repeat 3] [--before TREE] [--write docs/benchmarks.md]

Run from the repository root as a module: the sshd (two loopback "hosts") is the dev-only ``testbeds`` one.

Each of the 4 ranks writes ``--mb`` MiB of 100-byte lines (``bench_output``'s rank script), so 116 MiB in
all at the default; throughput is all bytes over the time from the first rank's first write to the launcher's
exit. Beside it, in the same run and interleaved with it: ``ssh HOST cat FILE > /dev/null`` to both hosts at
once and ``pdsh -w HOSTS cat FILE > /dev/null``, FILE holding each host's share of the same lines (their time:
the command's whole run, connection included), and 4 local ranks. ``--before TREE`` adds the dslaunch rows run
from another checkout (say ``git archive HEAD | tar -x -C TREE``), interleaved with these. Peak RSS (VmHWM)
of the launcher, for that job and for a trivial one (every rank exits at once); CPU seconds of this side (the
launcher and what it waited for: pdsh and its ssh clients, or the local agents and ranks; not sshd and what runs
under it). Medians of ``--repeat``. A script, not a test.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.bench_output import DSLAUNCH, RANK, Bench, Sampler
from bench.docblock import write_block

HOSTS = ("127.0.0.2", "127.0.0.3")
Case = Callable[[], tuple[float, "Sampler | None"]]


def _bare(cmd: list[str], env: dict[str, str]) -> tuple[float, None]:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr.decode()[-2000:]}")
    return time.perf_counter() - start, None


def _both(cmds: list[list[str]], env: dict[str, str]) -> tuple[float, None]:
    start = time.perf_counter()
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.DEVNULL) for c in cmds]
    if any(p.wait() for p in procs):
        raise SystemExit(f"failed: {cmds}")
    return time.perf_counter() - start, None


def cases(
    bench: Bench, tmp: Path, cluster: object, mb: int, before: str | None
) -> tuple[dict[str, Case], dict[str, Case]]:
    """(the volume cases, the trivial jobs whose launcher RSS is measured)."""
    config = str(cluster.config)  # type: ignore[attr-defined]
    aliases = cluster.aliases  # type: ignore[attr-defined]
    rank = tmp / "rank.py"
    rank.write_text(RANK)
    share = tmp / "share.txt"  # one host's bytes: 2 ranks x mb MiB of the same lines
    with share.open("wb") as f:
        for _ in range(2 * mb):
            f.write((b"x" * 99 + b"\n") * 10485)
    hosts = str(cluster.hostfile(list(aliases), slots=2, name="hosts-2x2"))  # type: ignore[attr-defined]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PDSH_")}
    pdsh_env = {**env, "PDSH_SSH_ARGS_APPEND": f"-F {config}"}
    ssh = ["ssh", "-F", config]

    def job(launcher: str, size: int, tree: str | None = None) -> Case:
        def one() -> tuple[float, Sampler]:
            rid = "b" + uuid.uuid4().hex[:10]
            cmd = [*DSLAUNCH, "--launcher", launcher, "-H", hosts, "--ssh-config", config, "--master-port", "0"]
            cmd += ["--export", "MB", "--export", "STAMPS", "--run-id", rid, str(rank)]
            here = os.getcwd()
            os.chdir(tree or here)  # python -m dslaunch, and each agent (cd to the launcher's cwd), from the tree
            try:
                return bench.run(cmd, size, rid)
            finally:
                os.chdir(here)

        return one

    volume: dict[str, Case] = {
        "`ssh HOST cat FILE > /dev/null`, both hosts at once": lambda: _both(
            [[*ssh, a, "cat", str(share)] for a in aliases], env
        ),
        "`dslaunch --launcher ssh rank.py > /dev/null`": job("ssh", mb),
    }
    trivial: dict[str, Case] = {"`dslaunch --launcher ssh`, trivial job": job("ssh", 0)}
    if shutil.which("pdsh"):
        volume["`pdsh -R ssh -w HOSTS cat FILE > /dev/null`"] = lambda: _bare(
            ["pdsh", "-R", "ssh", "-w", ",".join(aliases), "cat", str(share)], pdsh_env
        )
        volume["`dslaunch --launcher pdsh rank.py > /dev/null`"] = job("pdsh", mb)
        trivial["`dslaunch --launcher pdsh`, trivial job"] = job("pdsh", 0)
    volume["`dslaunch --nproc-per-node 4 rank.py > /dev/null` (local)"] = lambda: bench.run(
        [*DSLAUNCH, "--nproc-per-node", "4", str(rank)], mb
    )
    if before:
        for launcher in ("ssh", "pdsh") if shutil.which("pdsh") else ("ssh",):
            volume[f"before: `dslaunch --launcher {launcher} rank.py > /dev/null`"] = job(launcher, mb, before)
            trivial[f"before: `dslaunch --launcher {launcher}`, trivial job"] = job(launcher, 0, before)
    return volume, trivial


Measured = dict[str, tuple[float, float | None, float]]  # name -> (median seconds, peak launcher RSS MB, CPU s)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(named: dict[str, Case], repeat: int) -> Measured:
    """Median seconds, peak launcher RSS (MB) and median CPU seconds of this side, the cases interleaved."""
    times: dict[str, list[float]] = {name: [] for name in named}
    cpus: dict[str, list[float]] = {name: [] for name in named}
    peaks: dict[str, float | None] = dict.fromkeys(named)
    for _ in range(repeat):
        for name, case in named.items():
            cpu = _children_cpu()
            seconds, sampler = case()
            cpus[name].append(_children_cpu() - cpu)
            times[name].append(seconds)
            if sampler is not None:
                peaks[name] = max(peaks[name] or 0.0, sampler.launcher)
    return {name: (statistics.median(t), peaks[name], statistics.median(cpus[name])) for name, t in times.items()}


def table(volume: Measured, trivial: Measured, mb: int, repeat: int) -> str:
    total = 4 * mb * 1.048576
    rows = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, median of {repeat} interleaved runs; "
        f"2 loopback hosts x 2 ranks, {4 * mb} MiB in all.",
        "",
        "| command | time | throughput | CPU, this side | launcher peak RSS |",
        "|---|---|---|---|---|",
    ]
    mbs = lambda v: "—" if v is None else f"{v:.0f} MB"  # noqa: E731
    for name, (seconds, peak, cpu) in volume.items():
        rows.append(f"| {name} | {seconds:.2f} s | {total / seconds:.0f} MB/s | {cpu:.2f} s | {mbs(peak)} |")
    for name, (_, peak, _) in trivial.items():
        rows.append(f"| {name} | | | | {mbs(peak)} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=29, help="MiB per rank (4 ranks)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", help="write the markdown table into this file")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--before", help="also run the dslaunch rows from this checkout")
    args = parser.parse_args()
    from testbeds.ssh_cluster import start_cluster

    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-remote-output-"))
    cluster = start_cluster(HOSTS)
    try:
        bench = Bench(tmp, {**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        volume, trivial = cases(bench, tmp, cluster, args.mb, args.before)
        volume = {k: v for k, v in volume.items() if args.only in k}
        trivial = {k: v for k, v in trivial.items() if args.only in k}
        text = table(measure(volume, args.repeat), measure(trivial, args.repeat), args.mb, args.repeat)
    finally:
        cluster.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(text)
    if args.write:
        write_block(Path(args.write), "bench_remote_output", text)


if __name__ == "__main__":
    main()
