"""A private Slurm cluster on one host, for tests.

Three slurmd (n1, n2, n3, all 127.0.0.1, MULTIPLE_SLURMD) plus slurmctld and a
munged on a private socket; free ports; all state under a fresh directory.
The default partition ``debug`` has n1 and n2 (tests that name the hosts they
get rely on it); ``wide`` has all three, for spares (``salloc -p wide -N3``).
Daemons are stopped by their recorded PIDs only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

NODES = ("n1", "n2", "n3")
DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey", "srun", "salloc", "sinfo", "scancel")


def missing_tools() -> list[str]:
    return [tool for tool in DAEMONS if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}")]


def _tool(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


_CONF = """\
ClusterName=dsltest
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={base}/munge/munge.socket.2
CredType=cred/munge
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
StateSaveLocation={base}/slurm/state
SlurmdSpoolDir={base}/slurm/spool/%n
SlurmctldPidFile={base}/slurm/run/slurmctld.pid
SlurmdPidFile={base}/slurm/run/slurmd-%n.pid
SlurmctldLogFile={base}/slurm/log/slurmctld.log
SlurmdLogFile={base}/slurm/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SlurmdParameters=config_overrides
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=3
NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 Port={n1_port} CPUs=4 State=UNKNOWN
NodeName=n2 NodeHostname=localhost NodeAddr=127.0.0.1 Port={n2_port} CPUs=4 State=UNKNOWN
NodeName=n3 NodeHostname=localhost NodeAddr=127.0.0.1 Port={n3_port} CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
PartitionName=wide Nodes=n[1-3] MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


@dataclass
class Cluster:
    base: Path
    conf: Path
    pids: list[int]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for log in sorted((self.base / "slurm" / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"== {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def stop(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        for pid in self.pids:
            while time.monotonic() < deadline:
                try:
                    if os.waitpid(pid, os.WNOHANG) != (0, 0):
                        break
                except ChildProcessError:
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass


def start(base: Path, timeout: float = 30.0) -> Cluster:
    munge = base / "munge"
    slurm = base / "slurm"
    for d in (
        munge,
        slurm / "etc",
        slurm / "state",
        slurm / "spool" / "n1",
        slurm / "spool" / "n2",
        slurm / "spool" / "n3",
        slurm / "log",
        slurm / "run",
    ):
        d.mkdir(parents=True, exist_ok=True)
    for d in (base, munge):
        d.chmod(0o755)  # munged refuses a socket path with a directory lacking o+x
    cluster = Cluster(base, slurm / "etc" / "slurm.conf", [])
    try:
        _start(cluster, munge, slurm, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _spawn(cluster: Cluster, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    cluster.pids.append(proc.pid)


def _start(cluster: Cluster, munge: Path, slurm: Path, timeout: float) -> None:
    subprocess.run([_tool("mungekey"), "--create", f"--keyfile={munge / 'munge.key'}"], check=True, timeout=10)
    _spawn(
        cluster,
        [
            _tool("munged"),
            "-F",
            f"--socket={munge / 'munge.socket.2'}",
            f"--key-file={munge / 'munge.key'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={munge / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ],
        munge / "munged.out",
    )
    _wait((munge / "munge.socket.2").exists, 10, "munged socket")
    ctld, slurmd_port, n1, n2, n3 = _free_ports(5)
    cluster.conf.write_text(
        _CONF.format(base=cluster.base, ctld_port=ctld, slurmd_port=slurmd_port, n1_port=n1, n2_port=n2, n3_port=n3)
    )
    env = {**os.environ, **cluster.env}
    _spawn(cluster, [_tool("slurmctld"), "-D", "-f", str(cluster.conf)], slurm / "log" / "slurmctld.out", env)
    for node in NODES:
        _spawn(
            cluster,
            [_tool("slurmd"), "-D", "-N", node, "-f", str(cluster.conf)],
            slurm / "log" / f"slurmd-{node}.out",
            env,
        )

    def idle() -> bool:
        res = subprocess.run(
            [_tool("sinfo"), "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env, timeout=10
        )
        states = dict(line.split() for line in res.stdout.splitlines() if len(line.split()) == 2)
        return all(states.get(node) == "idle" for node in NODES)

    _wait(idle, timeout, f"{len(NODES)} idle slurm nodes")


def _wait(check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
