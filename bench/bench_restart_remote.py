"""Restarts over ssh and pdsh with job agents (issue 31): 2 hosts x 2 gloo torch ranks on the
loopback ssh test bed (testbeds/ssh_cluster.py: one sshd, hosts node1.. on 127.0.0.2..), against one ``import torch``
and torchrun timed in the same run.

    python bench/bench_restart_remote.py [--repeat 3] [--write docs/benchmarks.md]

Two cases, each with ``--max-restarts 1 --restart-delay 0``:

- **rank failure**: once every rank of attempt 0 is past ``dslaunch.engine()``, rank 1 stamps ``time.time()`` and
  exits 1; the figure runs from that stamp until the last rank of attempt 1 is past ``engine()`` again. Beside it,
  torchrun as two nodes (two ``torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d`` on this machine,
  ``--max-restarts 1``; torchrun has no ssh launcher, so each node's torchrun is started here);
- **node lost, warm spare**: a third host stands by (``--num-nodes 2``); once attempt 0 is past ``engine()``,
  node1's agent is SIGKILLed (the stamp is taken just before); the figure runs to the last rank of attempt 1 past
  ``engine()`` on node2 and the spare.

Each runner (``--launcher ssh``, ``--launcher pdsh``) in both ways: "warm" is ``--preload torch`` (each host's
agent keeps a zygote that imported torch: the spare's too, from the job's start); "exec" starts every rank as a new
interpreter. Launchers are interleaved in each round; medians. A
script, not a test: the machine is shared and noisy; the load average is printed with the figures.
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
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.bench_restart import bare_import
from bench.docblock import free_port, write_block
from testbeds.ssh_cluster import SshCluster, start_cluster

BIN = Path(sys.executable).parent
RANK = """\
import os, sys, time
import torch
import torch.distributed as dist

if os.environ.get("BENCH_TORCHRUN"):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
else:
    import dslaunch

    rank = dslaunch.engine().rank
attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
out = os.environ["BENCH_OUT"]
if attempt == "0":
    open(os.path.join(out, f"init{rank}"), "w").close()
    if os.environ["BENCH_CASE"] == "fail" and rank == 1:
        while len([n for n in os.listdir(out) if n.startswith("init")]) < dist.get_world_size():
            time.sleep(0.01)
        with open(os.path.join(out, "failed"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)
    time.sleep(120)  # stopped by the launcher
with open(os.path.join(out, f"ready{rank}"), "w") as f:
    f.write(repr(time.time()))
dist.barrier()
os._exit(0)
"""
WORLD = 4
DSLAUNCH = ("ssh warm", "ssh exec", "pdsh warm", "pdsh exec")  # --launcher, and --preload torch or none
CASES = {"fail": (*DSLAUNCH, "torchrun"), "lost": DSLAUNCH}
TARGETS = {"fail": 0.25, "lost": 0.5}  # issue 31: of one import torch


def _env(out: Path, case: str) -> dict[str, str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "BENCH_OUT": str(out), "BENCH_CASE": case}
    env.update(DSLAUNCH_PG_TIMEOUT="60", GLOO_SOCKET_IFNAME="lo")
    for name in [k for k in env if k.startswith(("PDSH_", "DS_ENV_FILE", "DSLAUNCH_PRELOAD", "DSLAUNCH_RUN_ID"))]:
        env.pop(name)
    return env


def _dslaunch(cluster: SshCluster, case: str, launcher: str, script: Path, out: Path) -> list[list[str]]:
    runner, _, how = launcher.partition(" ")
    warm = how == "warm"
    hosts = ["node1", "node2", "node3"] if case == "lost" else ["node1", "node2"]
    argv = [str(BIN / "dslaunch"), "--hostfile", str(cluster.hostfile(hosts, 2, name=f"bench-{case}")),
            "--launcher", runner, "--ssh-config", str(cluster.config), "--master-port", str(free_port()),
            "--max-restarts", "1", "--restart-delay", "0", "--shutdown-timeout", "2",
            *(["--num-nodes", "2"] if case == "lost" else []), *(["--preload", "torch"] if warm else []),
            "--export", f"BENCH_OUT={out}", "--export", f"BENCH_CASE={case}", str(script)]  # fmt: skip
    return [argv]


def _torchrun(script: Path) -> list[list[str]]:
    rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}"]
    argv = [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "2", *rdzv, "--max-restarts", "1", str(script)]
    return [argv, argv]


def one(cluster: SshCluster, case: str, launcher: str, script: Path, out: Path) -> float | str:
    """Seconds from the failure (or the agent's kill) to the last rank of attempt 1 past the rendezvous."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    env = _env(out, case)
    if launcher == "torchrun":
        env["BENCH_TORCHRUN"] = "1"
        argvs = _torchrun(script)
    else:
        argvs = _dslaunch(cluster, case, launcher, script, out)
    procs = [
        subprocess.Popen(a, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        for a in argvs
    ]
    try:
        if case == "lost" and not _kill_node1_agent(out, procs[0]):
            return "attempt 0 never got past init"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(p.poll() is None for p in procs):
            time.sleep(0.05)
    finally:
        for p in procs:
            _kill_tree(p, out)  # before reading stderr: what is left of a job holds the pipe open
    ready = [out / f"ready{r}" for r in range(WORLD)]
    if not (out / "failed").exists() or not all(p.exists() for p in ready):
        return _why(procs)
    return max(float(p.read_text()) for p in ready) - float((out / "failed").read_text())


def _why(procs: list[subprocess.Popen[bytes]]) -> str:
    errs = [p.stderr.read().decode(errors="replace") if p.stderr else "" for p in procs]
    codes = ", ".join(str(p.returncode) for p in procs)
    if any("connectFullMesh" in e for e in errs):  # as in bench_restart.py: a peer's old gloo address
        refused = any("Connection refused" in e for e in errs)
        return f"exit {codes}: attempt 1 died in gloo's connectFullMesh{', Connection refused' if refused else ''}"
    if all(p.returncode == -signal.SIGKILL for p in procs):
        return "hung until the 120 s time-out"
    lines = [line for line in errs[0].strip().splitlines() if line.strip() and not line.startswith(("=", " ", "["))]
    return f"exit {codes}: {lines[-1][-160:] if lines else '-'}"


def _kill_node1_agent(out: Path, launcher: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 90
    while len(list(out.glob("init*"))) < WORLD:
        if time.monotonic() > deadline or launcher.poll() is not None:
            return False
        time.sleep(0.02)
    for proc in psutil.process_iter():
        try:  # each agent for the job names its host in its environment (a forked rank shows its zygote's)
            if "--for-job" in proc.cmdline() and proc.environ().get("DSLAUNCH_HOST") == "node1":
                (out / "failed").write_text(repr(time.time()))
                proc.kill()
                return True
        except psutil.Error:
            continue
    return False


def _kill_tree(proc: subprocess.Popen[bytes], out: Path) -> None:
    """The launcher, and every process of its round (each carries BENCH_OUT; torchrun's ranks can outlive it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    for other in psutil.process_iter():
        try:
            if other.pid != os.getpid() and other.environ().get("BENCH_OUT") == str(out):
                other.kill()
        except psutil.Error:
            continue


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", help="write the markdown table into this file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-rr-"))
    script = tmp / "rank.py"
    script.write_text(RANK)
    cluster = start_cluster()
    load_before = os.getloadavg()[0]
    results: dict[tuple[str, str], list[float | str]] = {(c, n): [] for c, names in CASES.items() for n in names}
    imports: list[float] = []
    try:
        for _ in range(args.repeat):
            imports.append(bare_import())
            for case, names in CASES.items():
                for name in names:
                    out = tmp / f"out-{len(results[(case, name)])}-{case}-{name.replace(' ', '-')}"
                    results[(case, name)].append(one(cluster, case, name, script, out))
                    print(f"{case} {name}: {results[(case, name)][-1]}", file=sys.stderr, flush=True)
    finally:
        cluster.stop()
    table = _table(args.repeat, results, statistics.median(imports), load_before)
    print(table)
    if args.write:
        write_block(Path(args.write), "bench_restart_remote", table)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(cluster.base, ignore_errors=True)


def _table(repeat: int, results: dict[tuple[str, str], list[float | str]], imp: float, load: float) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load:.1f} before, {os.getloadavg()[0]:.1f} after, median of {repeat} interleaved rounds; 2 hosts x 2 gloo "
        "ranks over ssh and pdsh on loopback (`bench/bench_restart_remote.py`). Time until every rank of the next "
        "attempt is past `dslaunch.engine()` (torchrun: `init_process_group`):",
        "",
        "| case | launcher | time | / one `import torch` | target |",
        "|---|---|---|---|---|",
        f'| | one bare `python -c "import torch"` | {imp:.2f} s | 1.00x | |',
    ]
    for (case, name), values in results.items():
        numbers = [v for v in values if isinstance(v, float)]
        what = "rank 1 fails" if case == "fail" else "node1's agent SIGKILLed, a spare standing by takes its place"
        if len(numbers) == len(values):
            median = statistics.median(numbers)
            cell, ratio = f"{median:.2f} s", f"{median / imp:.2f}x"
        else:
            whys = "; ".join(sorted({v for v in values if isinstance(v, str)}))
            cell, ratio = f"failed in {len(values) - len(numbers)} of {len(values)}: {whys}", "-"
        target = f"<= {TARGETS[case]}x" if name.endswith("warm") else ""
        label = name if name == "torchrun" else f"dslaunch {name}"
        lines.append(f"| {what} | `{label}` | {cell} | {ratio} | {target} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
