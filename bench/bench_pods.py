"""A lost pod: one job of 2 pods x 2 trivial ranks on loopback, one launcher per pod; pod 1 is deleted (SIGKILL
to its launcher's process group and to every process under it, as a pod's deletion takes its whole container);
time until every rank on pod 0 is gone, and until pod 0's launcher has exited. dslaunch (configured by PET_*
alone, as a Kubeflow PyTorchJob configures torchrun) beside torchrun with the c10d rendezvous.

    python bench/bench_pods.py [--repeat 5] [--cap 30] [--write docs/benchmarks.md]

Each rank is ``tests/scripts/job.py sleep DIR``: it writes DIR/ready.RANK (its pid) and sleeps, so no rank is in a
collective when the pod goes. The clock starts just before the first SIGKILL; pod 0's ranks (the ready pids
under pod 0's launcher) are polled every 5 ms, a zombie counting as gone. torchrun's pod 0 starts first and
hosts the rendezvous store, as the master pod does. A launcher still running at --cap seconds is recorded as
"not stopped" and killed with everything under it. A script, not a test: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block

ROOT = Path(__file__).resolve().parents[1]
JOB = str(ROOT / "tests" / "scripts" / "job.py")
LAUNCHERS = ("dslaunch", "torchrun")
WORLD = 4  # 2 pods x 2 ranks
POLL = 0.005


@dataclass
class Round:
    """One round of one launcher: seconds from the kill, or None for 'not by the cap'."""

    ranks: float | None = None
    launcher: float | None = None
    code: int | None = None
    left: list[str] | None = None  # checked only where pod 0's launcher exited by itself
    why: str = ""  # set when the round never got to the kill


def free_port_pair() -> int:
    """A port P with P and P+1 free (dslaunch: the rendezvous, then the pods' control channel)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free ports in a row")


def _popen(argv: list[str], env: dict[str, str], folder: Path, name: str) -> subprocess.Popen[bytes]:
    """One pod's launcher, in a session of its own, its output in a file (a pipe nobody reads could block it)."""
    with open(folder / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            argv, env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )


def start_dslaunch(folder: Path, run_id: str) -> list[subprocess.Popen[bytes]]:
    port = free_port_pair()
    pods = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "PET_NNODES": "2",
            "PET_NODE_RANK": str(rank),
            "PET_NPROC_PER_NODE": "2",
            "PET_MASTER_ADDR": "127.0.0.1",
            "PET_MASTER_PORT": str(port),
            "PET_RDZV_ID": run_id,
            "PET_RDZV_CONF": "join_timeout=30",
            "DSLAUNCH_JOB_SECRET": f"bench-pods-{run_id}",
            "CUDA_VISIBLE_DEVICES": "",
        }
        argv = [sys.executable, "-m", "dslaunch", JOB, "sleep", str(folder)]
        pods.append(_popen(argv, env, folder, f"pod{rank}"))
    return pods


def start_torchrun(folder: Path, run_id: str) -> list[subprocess.Popen[bytes]]:
    """Pod 0 first, and pod 1 once pod 0 listens: pod 0 then hosts the c10d store, as the master pod would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DSLAUNCH_"))}
    env["CUDA_VISIBLE_DEVICES"] = ""
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        run_id,
        "--rdzv-conf",
        "join_timeout=30",
        "--max-restarts",
        "0",
        JOB,
        "sleep",
        str(folder),
    ]
    pods = [_popen(argv, env, folder, "pod0")]
    deadline = time.monotonic() + 60
    while not _listening(port) and pods[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    pods.append(_popen(argv, env, folder, "pod1"))
    return pods


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_ready(folder: Path, pods: list[subprocess.Popen[bytes]], timeout: float) -> dict[int, int] | None:
    """Every rank's pid once all WORLD ready files hold one; None if a pod ended or the time ran out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and all(p.poll() is None for p in pods):
        pids = {}
        for rank in range(WORLD):
            try:
                pids[rank] = int((folder / f"ready.{rank}").read_text())
            except (OSError, ValueError):  # not there yet, or half written
                break
        if len(pids) == WORLD:
            return pids
        time.sleep(0.05)
    return None


def tree(pid: int) -> list[psutil.Process]:
    """The process and everything under it, now."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def delete_pod(pod: subprocess.Popen[bytes]) -> None:
    """What deleting the pod does: every process in it killed at once. The launcher's process group, and what
    is under the launcher (both launchers start their ranks in sessions of their own)."""
    under = tree(pod.pid)
    try:
        os.killpg(pod.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for proc in under:
        _kill(proc)


def _kill(proc: psutil.Process) -> None:
    try:
        proc.kill()  # psutil checks the pid was not reused
    except psutil.Error:
        pass


def gone(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def watch(ranks: list[psutil.Process], launcher: subprocess.Popen[bytes], start: float, cap: float) -> Round:
    """Poll until pod 0's ranks are gone and its launcher has exited, or the cap."""
    result = Round()
    while True:
        now = time.monotonic() - start
        if result.ranks is None and all(gone(p) for p in ranks):
            result.ranks = now
        if result.launcher is None and launcher.poll() is not None:
            result.launcher = now
            result.code = launcher.returncode
        if (result.ranks is not None and result.launcher is not None) or now > cap:
            return result
        time.sleep(POLL)


def job_processes(folder: Path) -> list[psutil.Process]:
    """Processes with the round's folder as an argument: its ranks (``job.py sleep FOLDER``), torchrun's agents."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.pid != os.getpid() and str(folder) in (proc.info["cmdline"] or []):
            found.append(proc)
    return found


def leftovers(folder: Path, known: list[psutil.Process], wait: float = 5) -> list[str]:
    """The job's processes still alive ``wait`` s after pod 0's launcher exited (pod 1's were killed by us)."""
    deadline = time.monotonic() + wait
    while True:
        alive = [p for p in known if not gone(p)]
        alive += [p for p in job_processes(folder) if p not in alive and not gone(p)]
        if not alive or time.monotonic() > deadline:
            return [_name(p) for p in alive]
        time.sleep(0.1)


def _name(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:120]}"
    except psutil.Error:
        return str(proc.pid)


def cleanup(pods: list[subprocess.Popen[bytes]], known: list[psutil.Process], folder: Path) -> None:
    """Kill whatever of the round is left: both pods' process groups, everything seen under them, any rank."""
    for pod in pods:
        known = known + tree(pod.pid)
        try:
            os.killpg(pod.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for proc in [*known, *job_processes(folder)]:
        _kill(proc)
    for pod in pods:
        pod.wait()


def one_round(launcher: str, folder: Path, cap: float) -> Round:
    folder.mkdir(parents=True)
    run_id = f"benchpods{os.getpid()}{folder.name}"
    pods = (start_dslaunch if launcher == "dslaunch" else start_torchrun)(folder, run_id)
    known: list[psutil.Process] = []
    try:
        pids = wait_ready(folder, pods, 90)
        if pids is None:
            return Round(why=f"did not start: {_tail(folder)}")
        known = tree(pods[0].pid) + tree(pods[1].pid)
        under_pod0 = {p.pid for p in tree(pods[0].pid)}
        ranks = [psutil.Process(pid) for pid in pids.values() if pid in under_pod0]
        if len(ranks) != 2:
            return Round(why=f"{len(ranks)} ready ranks under pod 0's launcher, not 2")
        start = time.monotonic()
        delete_pod(pods[1])
        result = watch(ranks, pods[0], start, cap)
        if result.launcher is not None:
            result.left = leftovers(folder, known)
        return result
    finally:
        cleanup(pods, known, folder)


def _tail(folder: Path) -> str:
    """Each pod's last line of output (an error's last line is its message)."""
    lasts = []
    for r in (0, 1):
        lines = (folder / f"pod{r}.log").read_text(errors="replace").strip().splitlines()
        lasts.append(f"pod {r}: {lines[-1][-150:] if lines else 'no output'}")
    return "; ".join(lasts)


def _spread(values: list[float | None], cap: float) -> str:
    numbers = [v for v in values if v is not None]
    cell = ""
    if numbers:
        cell = f"{min(numbers):.3f} / {statistics.median(numbers):.3f} / {max(numbers):.3f} s"
    if len(numbers) < len(values):
        missed = f"not stopped after {cap:.0f} s in {len(values) - len(numbers)} of {len(values)} rounds"
        cell = f"{missed} ({len(numbers)} stopped: {cell})" if numbers else f"**{missed}**"
    return cell


def _ratio(mine: list[Round], theirs: list[Round], cap: float) -> str:
    """torchrun's median over dslaunch's, both on 'every rank of pod 0 gone'; a lower bound where it never was."""
    ours = [r.ranks for r in mine if r.ranks is not None]
    other = [r.ranks for r in theirs]
    if not ours or not other:
        return "-"
    if any(v is None for v in other):
        return f"> {cap / statistics.median(ours):.0f}x (torchrun did not stop within the cap)"
    return f"{statistics.median([v for v in other if v is not None]) / statistics.median(ours):.1f}x"


def table(args: argparse.Namespace, results: dict[str, list[Round]], load_before: float) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, load average "
        f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other jobs shared the machine), Python "
        f"{sys.version.split()[0]}, {args.repeat} interleaved rounds (min / median / max). Two pods of 2 sleeping "
        "ranks on loopback; pod 1 deleted (SIGKILL to all of it); time from the kill until every rank on pod 0 "
        f"is gone, and until pod 0's launcher has exited; cap {args.cap:.0f} s:",
        "",
        "| launcher | pod 0's ranks gone | pod 0's launcher exited | its exit code | left behind |",
        "|---|---|---|---|---|",
    ]
    for name, rounds in results.items():
        ran = [r for r in rounds if not r.why]
        whys = sorted({r.why for r in rounds if r.why})
        codes = sorted({str(r.code) for r in ran if r.code is not None}) or ["- (killed at the cap)"]
        checked = [r.left for r in ran if r.left is not None]
        left = f"{sum(len(names) for names in checked)} processes" if checked else "- (killed at the cap)"
        note = f"; {len(whys)} round(s) never started: {'; '.join(whys)}" if whys else ""
        lines.append(
            f"| `{name}` | {_spread([r.ranks for r in ran], args.cap)}{note} | "
            f"{_spread([r.launcher for r in ran], args.cap)} | {', '.join(codes)} | {left} |"
        )
    if set(LAUNCHERS) <= set(results):
        lines += ["", f"torchrun / dslaunch (pod 0's ranks gone, medians): {_ratio(*_pair(results), args.cap)}"]
    return "\n".join(lines)


def _pair(results: dict[str, list[Round]]) -> tuple[list[Round], list[Round]]:
    ran = {name: [r for r in rounds if not r.why] for name, rounds in results.items()}
    return ran["dslaunch"], ran["torchrun"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cap", type=float, default=30, help="seconds to wait for pod 0 to stop")
    parser.add_argument("--launchers", default=",".join(LAUNCHERS))
    parser.add_argument("--write", help="write the markdown table into this file")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dslaunch-bench-pods-"))
    load_before = os.getloadavg()[0]
    results: dict[str, list[Round]] = {name: [] for name in args.launchers.split(",")}
    try:
        for i in range(args.repeat):
            for name, rounds in results.items():  # interleaved: load changes hit both launchers alike
                result = one_round(name, tmp / f"{name}{i}", args.cap)
                rounds.append(result)
                print(f"{name}: {result}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = table(args, results, load_before)
    print(text)
    if args.write:
        write_block(Path(args.write), "bench_pods", text)


if __name__ == "__main__":
    main()
