"""Console collapse: what it costs, side by side with the same launcher without it (``--no-collapse-output``).

    python -m bench.bench_collapse [--mb 50] [--repeat 5] [--no-ssh] [--write docs/logging.md]

Run from the repository root as a module (the ssh rows use the dev-only ``testbeds`` sshd). Each pair of
commands differs only in the switch and runs interleaved, ``--repeat`` times; medians, and on/off as a ratio:

- flood: 4 ranks each write ``--mb`` MiB of 100-byte lines to stdout (/dev/null), lines of their own or the
  same lines on every rank (the worst case: every line opens, fills and closes a window); wall time from the
  first rank's first write to the launcher's exit, and the CPU time of launcher, agents and ranks together;
- latency: 4 ranks print one line at an agreed time; how long from the last rank's print until the launcher's
  stdout (a pipe we read) has the last of them: lines of their own, or the same line (the held copies' line
  comes when the window closes).
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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.bench_output import DSLAUNCH, STAMPED, Bench
from bench.docblock import write_block

OWN = (  # lines of its own on each rank
    "import os\n"
    'BLOCK = b"".join(b"%s %08d %s\\n" % (os.environ["RANK"].encode(), i, b"x" * 80) for i in range(10485))\n'
)
SAME = 'BLOCK = (b"x" * 99 + b"\\n") * 10485\n'
STAMP = """\
import os, time
at = float(os.environ["AT"])
time.sleep(max(0.0, at - time.time()))
printed = time.time()
print(f"stamp {os.environ['RANK'] if os.environ.get('OWN') else 'all'} {at}", flush=True)
with open(os.path.join(os.environ["STAMPS"], os.environ["RANK"]), "w") as f:
    f.write(str(printed))
time.sleep(2.0)  # alive past the window: the job's end would flush what is held
"""
OFF = "--no-collapse-output"
Case = Callable[[], tuple[float, float]]  # -> (seconds, CPU seconds)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def flood(bench: Bench, launch: list[str], script: Path, mb: int) -> Case:
    def one() -> tuple[float, float]:
        cpu = _cpu()
        remote = "--launcher" in launch
        exports = ["--export", "MB", "--export", "STAMPS"] if remote else []
        seconds, _ = bench.run([*launch, *exports, str(script)], mb, agent=None if remote else "child")
        return seconds, _cpu() - cpu

    return one


def latency(launch: list[str], script: Path, own: bool) -> Case:
    """Seconds from the last rank's print to the last stamp line on our end of the pipe."""

    def one() -> tuple[float, float]:
        stamps = Path(tempfile.mkdtemp())
        env = {**os.environ, "AT": str(time.time() + 3.0), "STAMPS": str(stamps), **({"OWN": "1"} if own else {})}
        names = ["AT", "STAMPS", *(["OWN"] if own else [])]
        exports = [arg for name in names for arg in ("--export", name)] if "--launcher" in launch else []
        proc = subprocess.Popen([*launch, *exports, str(script)], stdout=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        arrived = [time.time() for line in proc.stdout if b"stamp" in line]
        proc.wait()
        return max(arrived) - max(float(p.read_text()) for p in stamps.iterdir()), 0.0

    return one


def measure(pairs: dict[str, tuple[Case, Case]], repeat: int) -> list[tuple[str, float, float, float, float]]:
    runs: dict[str, list[tuple[float, float]]] = {f"{n}{side}": [] for n in pairs for side in ("+", "-")}
    for _ in range(repeat):
        for name, (on, off) in pairs.items():
            runs[f"{name}+"].append(on())
            runs[f"{name}-"].append(off())
    rows = []
    for name in pairs:
        with_it = [statistics.median(v) for v in zip(*runs[f"{name}+"])]
        without = [statistics.median(v) for v in zip(*runs[f"{name}-"])]
        rows.append((name, with_it[0], without[0], with_it[1], without[1]))
    return rows


def table(rows: list[tuple[str, float, float, float, float]], mb: int, repeat: int) -> str:
    lines = [
        f"Measured by `python -m bench.bench_collapse --mb {mb} --repeat {repeat}` (medians; on: the default, "
        f"off: `{OFF}`, the same run interleaved):",
        "",
        "| case | on | off | on/off | CPU s on | CPU s off | CPU on/off |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, on, off, cpu_on, cpu_off in rows:
        cpu = f"{cpu_on:.2f} | {cpu_off:.2f} | {cpu_on / cpu_off:.2f}x" if cpu_off else "- | - | -"
        lines.append(f"| {name} | {on:.3f} s | {off:.3f} s | {on / off:.2f}x | {cpu} |")
    return "\n".join(lines)


def _scripts(tmp: Path) -> dict[str, Path]:
    scripts = {"own": OWN + STAMPED, "same": SAME + STAMPED, "stamp": STAMP}
    paths = {}
    for name, text in scripts.items():
        paths[name] = tmp / f"{name}.py"
        paths[name].write_text(text)
    return paths


def pairs_for(bench: Bench, tmp: Path, mb: int, remote: list[str] | None) -> dict[str, tuple[Case, Case]]:
    s = _scripts(tmp)
    local = [*DSLAUNCH, "--nproc-per-node", "4"]
    pairs: dict[str, tuple[Case, Case]] = {}
    for where, launch in [("local", local), ("ssh, 2 hosts x 2", remote)]:
        if launch is None:
            continue
        for kind in ("own", "same"):
            pairs[f"{where}: flood, {mb} MiB per rank, lines {kind}"] = (
                flood(bench, launch, s[kind], mb),
                flood(bench, [*launch, OFF], s[kind], mb),
            )
        pairs[f"{where}: one rank's line, s to our stdout"] = (
            latency(launch, s["stamp"], own=True),
            latency([*launch, OFF], s["stamp"], own=True),
        )
        pairs[f"{where}: 4 ranks' same line, s until the last copy shows"] = (
            latency(launch, s["stamp"], own=False),
            latency([*launch, OFF], s["stamp"], own=False),
        )
    return pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-ssh", action="store_true")
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        bench = Bench(tmp, dict(os.environ))
        cluster = None
        if not args.no_ssh:
            from testbeds.ssh_cluster import start_cluster

            cluster = start_cluster()
        try:
            remote = None
            if cluster is not None:
                hosts = str(cluster.hostfile(list(cluster.aliases)[:2], slots=2, name="hosts-collapse"))
                remote = [*DSLAUNCH, "--launcher", "ssh", "-H", hosts, "--ssh-config", str(cluster.config)]
                remote += ["--master-port", "0"]
            text = table(measure(pairs_for(bench, tmp, args.mb, remote), args.repeat), args.mb, args.repeat)
        finally:
            if cluster is not None:
                cluster.stop()
    print(text)
    if args.write:
        write_block(args.write, "bench-collapse", text)


if __name__ == "__main__":
    main()
