"""The real coordinator: a ``dslaunch`` launcher started as pod 0 of a job configured as Kubeflow configures
torchrun (PET_* alone, docs/kubernetes.md), on loopback, with RANKS trivial ranks (``--no-python sleep``: the ranks
per pod must be every pod's, pods/shape.py); and what one process costs, read from ``/proc``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dslaunch.oslib import prctl
from dslaunch.oslib.ports import listen_port

TICK = os.sysconf("SC_CLK_TCK")
PROGRAM = ["--no-python", "sleep", "3600"]


def free_port_pair() -> int:
    """A port P with P and P+1 free (the rendezvous, then the pods' control channel)."""
    for _ in range(50):
        port = listen_port("127.0.0.1")
        if port < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free ports in a row")


@dataclass(frozen=True)
class Job:
    """One pods' job: ``pods`` in all (the coordinator is one of them), ``elastic``: torchrun's c10d shape
    (``--nnodes N``, no node rank: the coordinator gives the node ranks; more pods stand by)."""

    pods: int
    ranks: int
    port: int
    run_id: str
    secret: str
    elastic: bool = False
    max_restarts: int = 10
    join_timeout: float = 120.0

    def env(self, node_rank: int = 0) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "DSLAUNCH_"))}
        env.update(
            PET_NNODES=str(self.pods),
            PET_NPROC_PER_NODE=str(self.ranks),
            PET_MASTER_PORT=str(self.port),
            PET_RDZV_ID=self.run_id,
            PET_RDZV_CONF=f"join_timeout={self.join_timeout:g}",
            DSLAUNCH_JOB_SECRET=self.secret,
            CUDA_VISIBLE_DEVICES="",
            BENCH_PODS_SCALE=self.run_id,  # every process of the job can be found by it
        )
        if self.elastic:
            env.update(PET_RDZV_BACKEND="c10d", PET_RDZV_ENDPOINT=f"127.0.0.1:{self.port + 1}")
        else:
            env.update(PET_NODE_RANK=str(node_rank), PET_MASTER_ADDR="127.0.0.1")
        return env

    @property
    def args(self) -> list[str]:
        restarts = ["--max-restarts", str(self.max_restarts), "--restart-delay", "0"]
        return ["--shutdown-timeout", "2", "--stop-grace", "1", *restarts, *PROGRAM]

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port + 1)

    def shape(self) -> dict[str, str]:
        """What a member pod sends in its answer (pods/shape.of_plan of the plan its own dslaunch would build)."""
        from dslaunch.pods.shape import of_plan
        from tests.plans import plan_of

        return of_plan(plan_of(self.args, env=self.env(node_rank=1)))


class Coordinator:
    """One coordinator process (in a session of its own, so its agent and ranks go with it)."""

    def __init__(self, job: Job, folder: Path, name: str = "coordinator") -> None:
        self.job = job
        self.log = folder / f"{job.run_id}-{name}.log"
        prctl.load()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "dslaunch", *job.args],
                env=job.env(0),
                cwd=folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_die_with_us,
            )
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_listening(self, timeout: float) -> bool:
        """Whether the control port is listening within ``timeout`` (read from /proc/net, no connection made)."""
        port = f":{self.job.port + 1:04X}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            for table in ("/proc/net/tcp6", "/proc/net/tcp"):
                try:
                    with open(table) as f:
                        if any(
                            line.split()[1].endswith(port) and line.split()[3] == "0A" for line in f.readlines()[1:]
                        ):
                            return True
                except OSError:
                    continue
            time.sleep(0.05)
        return False

    def kill(self) -> None:
        """A deleted pod: SIGKILL to the coordinator's process group (its launcher and agent; its ranks, each in a
        session of its own, follow by their parent-death signal), then to anything of the job still alive."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        deadline = time.monotonic() + 2.0
        while (left := job_processes(self.job.run_id)) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid, what in left.items():
            print(
                f"bench: killing a process of job {self.job.run_id} left 2 s after its coordinator: {what}", flush=True
            )
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def tail(self, chars: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def job_processes(run_id: str) -> dict[int, str]:
    """Live processes (not zombies) whose environment carries the job's mark, with their command lines."""
    mark = f"BENCH_PODS_SCALE={run_id}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if mark not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                found[int(entry)] = " ".join(p.decode(errors="replace") for p in f.read().split(b"\0") if p)
            with open(f"/proc/{entry}/status", "rb") as f:
                ppid = next(line.split()[1].decode() for line in f if line.startswith(b"PPid:"))
            found[int(entry)] += f" (pid {entry}, parent {ppid})"
        except OSError:
            continue
    return found


@dataclass(frozen=True)
class Usage:
    cpu: float  # seconds, user + system
    threads: int
    rss_mb: float
    hwm_mb: float


def usage(pid: int) -> Usage | None:
    """One process's CPU so far, threads and memory now (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except (OSError, IndexError):
        return None
    cpu = (int(fields[11]) + int(fields[12])) / TICK  # utime, stime: fields 14 and 15 of stat
    rss, hwm = (int(status.get(name, "0 kB").split()[0]) / 1024 for name in ("VmRSS", "VmHWM"))
    return Usage(cpu, int(status.get("Threads", "0")), rss, hwm)


def cpu_share(pids: list[int], seconds: float) -> tuple[float, list[Usage | None]]:
    """The share of one core ``pids`` used together over ``seconds`` (their CPU from /proc), and each at the end."""
    before = [usage(p) for p in pids]
    time.sleep(seconds)
    after = [usage(p) for p in pids]
    used = sum(a.cpu - b.cpu for a, b in zip(after, before) if a is not None and b is not None)
    return used / seconds, after


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _die_with_us() -> None:
    """In the child: SIGKILL when the benchmark dies, however it dies (prctl.load() ran in the parent)."""
    prctl.set_parent_death_signal(signal.SIGKILL)
