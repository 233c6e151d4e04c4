"""Output plane: MB/s relayed and peak RSS of launcher and agent, next to the rank alone and torchrun.

    python -m bench.bench_output [--mb 200] [--ssh-mb 50] [--repeat 3] [--no-ssh] [--write docs/benchmarks.md]

Run from the repository root as a module: the ssh rows use the dev-only ``testbeds`` sshd.

Each rank writes ``--mb`` MiB (``--ssh-mb`` over ssh, where it takes longer: a run over 5 s
can meet a shared machine's test suite that kills every dslaunch job it did not start)
of 100-byte lines, 1 MiB per write, and stamps when it started and
stopped writing. Throughput is all ranks' bytes over the time from the first rank's first write
to the last byte out: the last rank's last write for the ranks alone and torchrun (their stdout
is /dev/null itself), the launcher's exit for dslaunch (its buffers drained, teardown included).
So start-up (torchrun's 3 s) does not count. Commands are interleaved, ``--repeat`` times,
medians reported. Peak RSS is VmHWM, sampled every 20 ms. Extra rows: one line of 50 and 200 MiB
without a newline, and a 20,000-update ``\\r`` bar (the agent's CPU time). A script, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block

BIN = Path(sys.executable).parent
DSLAUNCH = [sys.executable, "-m", "dslaunch"]
TORCHRUN = [str(BIN / "torchrun")]
STAMPED = """\
import os, sys, time
start = time.time()
for _ in range(int(os.environ["MB"])):
    sys.stdout.buffer.write(BLOCK)
sys.stdout.buffer.flush()
with open(os.path.join(os.environ["STAMPS"], str(os.getpid())), "w") as f:
    f.write(f"{start} {time.time()}")
"""
RANK = 'BLOCK = (b"x" * 99 + b"\\n") * 10485\n' + STAMPED  # 100-byte lines
LONG = 'BLOCK = b"y" * 1048576\n' + STAMPED  # one line, no newline
BAR = """\
import sys
for i in range(20001):
    sys.stderr.write(f"\\r{i // 200:3d}%|{'#' * (i // 1000):20s}| {i}/20000")
    sys.stderr.flush()
sys.stderr.write("\\n")
"""
Row = tuple[str, str, float, float, "float | None", "float | None"]


def _hwm(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))


class Sampler(threading.Thread):
    """Peak RSS of the launcher and its node agent, and the agent's CPU time, every 20 ms.

    ``agent``: "child" (a forked local agent), a run id (a remote agent, found once by its
    environment), or None (no agent: torchrun's children are the ranks).
    """

    def __init__(self, pid: int, agent: str | None) -> None:
        super().__init__(daemon=True)
        self.pid, self.how = pid, agent
        self.launcher, self.agent_cpu = 0.0, 0.0
        self.agent: float | None = None if agent is None else 0.0
        self.found: list[psutil.Process] = []
        self.done = threading.Event()

    def agents(self) -> list[psutil.Process]:
        if self.how == "child":
            return psutil.Process(self.pid).children()
        if self.how is None or self.found:
            return self.found
        for p in psutil.process_iter(["cmdline"]):
            if (p.info["cmdline"] or [])[1:4] == ["-u", "-m", "dslaunch.agent"]:
                try:
                    if p.environ().get("DSLAUNCH_RUN_ID") == self.how:
                        self.found.append(p)
                except psutil.Error:
                    pass
        return self.found

    def run(self) -> None:
        while not self.done.is_set():
            try:
                self.launcher = max(self.launcher, _hwm(self.pid))
                for agent in self.agents():
                    self.agent = max(self.agent or 0.0, _hwm(agent.pid))
                    cpu = agent.cpu_times()
                    self.agent_cpu = max(self.agent_cpu, cpu.user + cpu.system)
            except (psutil.Error, OSError, StopIteration):
                pass
            time.sleep(0.02)


class Bench:
    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self.tmp, self.env = tmp, env

    def run(self, cmd: list[str], mb: int, agent: str | None = "child", pipe: bool = False) -> tuple[float, Sampler]:
        """(seconds from the first rank's first write to the last byte out, sampler)."""
        stamps = Path(tempfile.mkdtemp(dir=self.tmp))
        env = {**self.env, "MB": str(mb), "STAMPS": str(stamps)}
        out = subprocess.PIPE if pipe else subprocess.DEVNULL
        started = time.time()
        err = (stamps / "stderr").open("w+b")
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        sampler = Sampler(proc.pid, agent)
        sampler.start()
        if pipe:
            assert proc.stdout is not None
            while proc.stdout.read1(1 << 20):
                pass
        if proc.wait() != 0:
            err.seek(0)
            raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{err.read()[-3000:].decode()}")
        err.close()
        (stamps / "stderr").unlink()
        exited = time.time()
        sampler.done.set()
        sampler.join()
        spans = [tuple(map(float, p.read_text().split())) for p in stamps.iterdir()] or [(started, exited)]
        end = max(s[1] for s in spans) if agent is None else exited
        return end - min(s[0] for s in spans), sampler

    def alone(self, script: Path, n: int, mb: int, pipe: bool = False) -> tuple[float, None]:
        """The ranks without a launcher, on /dev/null or each through a pipe to ``cat > /dev/null``."""
        stamps = Path(tempfile.mkdtemp(dir=self.tmp))
        env = {**self.env, "MB": str(mb), "STAMPS": str(stamps)}
        cmd = f"{sys.executable} {script} | cat > /dev/null" if pipe else f"{sys.executable} {script} > /dev/null"
        procs = [subprocess.Popen(["sh", "-c", cmd], env=env) for _ in range(n)]
        for p in procs:
            p.wait()
        ended = time.time()
        spans = [tuple(map(float, p.read_text().split())) for p in stamps.iterdir()]
        return (ended if pipe else max(s[1] for s in spans)) - min(s[0] for s in spans), None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-ssh", action="store_true")
    parser.add_argument("--ssh-mb", type=int, default=50, help="MiB per rank over ssh and pdsh (about 80 MB/s there)")
    parser.add_argument("--write", help="write the markdown tables into this file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-output-"))
    scripts = {name: tmp / f"{name}.py" for name in ("rank", "long", "bar")}
    for name, text in (("rank", RANK), ("long", LONG), ("bar", BAR)):
        scripts[name].write_text(text)
    bench = Bench(tmp, {**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    rank = str(scripts["rank"])
    cluster = None
    if not args.no_ssh:
        from testbeds.ssh_cluster import start_cluster

        cluster = start_cluster(("127.0.0.2",))
    rows: list[Row] = []
    try:
        for n in (1, 4):
            nproc = ["--nproc-per-node", str(n)]
            cases: dict[str, Callable[[], tuple[float, Sampler | None]]] = {
                "`python rank.py > /dev/null`, each rank alone": lambda n=n: bench.alone(scripts["rank"], n, args.mb),
                "`python rank.py \\| cat > /dev/null`, each rank alone": lambda n=n: bench.alone(
                    scripts["rank"], n, args.mb, pipe=True
                ),
                "`torchrun rank.py > /dev/null`": lambda p=nproc: bench.run([*TORCHRUN, *p, rank], args.mb, None),
                "`dslaunch rank.py > /dev/null`": lambda p=nproc: bench.run([*DSLAUNCH, *p, rank], args.mb),
                "`dslaunch rank.py \\| reader`": lambda p=nproc: bench.run([*DSLAUNCH, *p, rank], args.mb, pipe=True),
            }
            if cluster is not None:
                hosts = str(cluster.hostfile([cluster.aliases[0]], slots=n, name=f"hosts{n}"))
                for launcher in ("ssh", "pdsh") if shutil.which("pdsh") else ("ssh",):
                    remote = ["--launcher", launcher, "-H", hosts, "--ssh-config", str(cluster.config)]

                    def over(remote: list[str] = remote) -> tuple[float, Sampler]:
                        rid = "b" + uuid.uuid4().hex[:10]
                        cmd = [*DSLAUNCH, *remote, "--master-port", "0", "--export", "MB", "--export", "STAMPS"]
                        return bench.run([*cmd, "--run-id", rid, rank], args.ssh_mb, rid)

                    cases[f"`dslaunch --launcher {launcher} rank.py > /dev/null` (loopback sshd)"] = over
            sizes = {name: args.ssh_mb if "--launcher " in name else args.mb for name in cases}
            rows.extend(_measure(cases, args.repeat, n, sizes))
            print(*(_row(r) for r in rows[-len(cases) :]), sep="\n", flush=True)
        extras = _extras(bench, scripts, args.repeat)
    finally:
        if cluster is not None:
            cluster.stop()
    table = _table(rows, extras, args.repeat)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_output", table)


def _measure(
    cases: dict[str, Callable[[], tuple[float, Sampler | None]]], repeat: int, n: int, mib: dict[str, int]
) -> list[Row]:
    """``mib``: per rank, for each case."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    peaks: dict[str, tuple[float | None, float | None]] = {name: (None, None) for name in cases}
    for _ in range(repeat):
        for name, case in cases.items():
            seconds, sampler = case()
            times[name].append(seconds)
            if sampler is not None:
                launcher, agent = peaks[name]
                peaks[name] = (
                    max(launcher or 0, sampler.launcher),
                    None if sampler.agent is None else max(agent or 0, sampler.agent),
                )
    return [
        (
            f"{n} x {mib[name]} MiB",
            name,
            statistics.median(t),
            n * mib[name] * 1.048576 / statistics.median(t),
            *peaks[name],
        )
        for name, t in times.items()
    ]


def _extras(bench: Bench, scripts: dict[str, Path], repeat: int) -> list[str]:
    lines, per_mib = [], {}
    for mib in (50, 200):
        seconds = statistics.median(bench.run([*DSLAUNCH, str(scripts["long"])], mib)[0] for _ in range(repeat))
        per_mib[mib] = seconds / mib
        lines.append(f"| one {mib} MiB line, no newline | {seconds:.2f} s | {mib * 1.048576 / seconds:.0f} MB/s |")
    lines.append(f"| time per MiB, 200 MiB line / 50 MiB line (1.0 = linear) | {per_mib[200] / per_mib[50]:.2f} | |")
    cpu = statistics.median(bench.run([*DSLAUNCH, str(scripts["bar"])], 0)[1].agent_cpu for _ in range(repeat))
    lines.append(f"| 20,000 `\\r` bar updates (stderr to a file): agent CPU | {cpu:.2f} s | |")
    return lines


def _row(r: Row, hop: float | None = None) -> str:
    size, name, seconds, rate, launcher, agent = r
    mb = lambda v: "—" if v is None else f"{v:.0f} MB"  # noqa: E731
    took = "< 0.01 s" if seconds < 0.01 else f"{seconds:.2f} s"
    speed = "> 10 GB/s" if rate > 10_000 else f"{rate:.0f} MB/s"
    vs = "" if hop is None else f" {rate / hop:.2f}x |" if rate <= 10_000 else " — |"
    return f"| {size} | {name} | {took} | {speed} |{vs} {mb(launcher)} | {mb(agent)} |"


def _table(rows: list[Row], extras: list[str], repeat: int) -> str:
    hops = {r[0].split()[0]: r[3] for r in rows if "| cat" in r[1]}
    head = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{os.getloadavg()[0]:.1f}, Python {sys.version.split()[0]}, median of {repeat} interleaved runs.",
        "",
        "| ranks x output | command | first write to last byte | throughput | vs one pipe hop (`\\| cat`) "
        "| launcher peak RSS | agent peak RSS |",
        "|---|---|---|---|---|---|---|",
    ]
    tail = ["", "| dslaunch, 1 rank, stdout on /dev/null | time | throughput |", "|---|---|---|"]
    return "\n".join(head + [_row(r, hops.get(r[0].split()[0])) for r in rows] + tail + extras)


if __name__ == "__main__":
    main()
