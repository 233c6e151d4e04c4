"""A real sshd on loopback aliases (127.0.0.2...), with private keys, known_hosts and ssh config."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ADDRS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


def need(tool: str) -> str:
    """The tool's path; skip without it locally, fail in CI (env CI set)."""
    path = shutil.which(tool) or (f"/usr/sbin/{tool}" if os.path.exists(f"/usr/sbin/{tool}") else None)
    if path is None:
        message = f"{tool} is not installed (apt-get install openssh-server openssh-client pdsh)"
        if os.environ.get("CI"):
            pytest.fail(message + " but CI is set")
        pytest.skip(message)
    return path


def free_port(addr: str = "127.0.0.2") -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


@dataclass
class SshCluster:
    base: Path
    port: int
    aliases: tuple[str, ...]  # node1.. -> ADDRS
    config: Path  # ssh_config with the aliases, strict host key checking against known_hosts
    known_hosts: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def hostfile(self, hosts: list[str], slots: int = 1, name: str = "hostfile") -> Path:
        path = self.base / name
        path.write_text("".join(f"{h} slots={slots}\n" for h in hosts))
        return path

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_cluster(addrs: tuple[str, ...] = ADDRS, *, own_home: bool = False) -> SshCluster:
    """sshd on ``addrs`` (aliases node1.. in the ssh config); the caller stops it. ``own_home``: its sessions'
    HOME is ``base/home`` (sshd's ``SetEnv``), not the user's (``testbeds/scale_cluster.py`` says why)."""
    sshd = need("sshd")
    need("ssh-keygen")
    base = Path(tempfile.mkdtemp(prefix="dslaunch-ssh-"))
    os.chmod(base, 0o700)
    port = free_port(addrs[0])
    _keygen(base / "host_key")
    _keygen(base / "id")
    (base / "authorized_keys").write_text((base / "id.pub").read_text())
    common = (
        f"Port {port}\nHostKey {base}/host_key\nAuthorizedKeysFile {base}/authorized_keys\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nAcceptEnv LANG LC_*\nMaxStartups 200:30:300\nMaxSessions 200\nLogLevel VERBOSE\n"
    )
    if own_home:
        (base / "home").mkdir(mode=0o700)
        common += f"SetEnv HOME={base}/home\n"
    # sshd listens on at most 16 addresses: one daemon per 16 "hosts"
    chunks = [addrs[i : i + 16] for i in range(0, len(addrs), 16)]
    for k, chunk in enumerate(chunks):
        name = "sshd_config" if k == 0 else f"sshd_config_{k}"
        listen = "".join(f"ListenAddress {a}\n" for a in chunk)
        (base / name).write_text(f"{common}{listen}PidFile {base}/sshd{k}.pid\n")
    host_pub = (base / "host_key.pub").read_text().split()
    (base / "known_hosts").write_text("".join(f"[{a}]:{port} {host_pub[0]} {host_pub[1]}\n" for a in addrs))
    aliases = tuple(f"node{i + 1}" for i in range(len(addrs)))
    (base / "ssh_config").write_text(
        "".join(f"Host {n}\n    HostName {a}\n" for n, a in zip(aliases, addrs))
        + f"Host *\n    Port {port}\n    User root\n    IdentityFile {base}/id\n    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {base}/known_hosts\n    StrictHostKeyChecking yes\n    BatchMode yes\n"
        "    LogLevel ERROR\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    cluster = SshCluster(base, port, aliases, base / "ssh_config", base / "known_hosts")
    try:
        for k in range(len(chunks)):
            name = "sshd_config" if k == 0 else f"sshd_config_{k}"
            cluster.procs.append(
                subprocess.Popen([sshd, "-D", "-f", str(base / name), "-E", str(base / f"sshd{k}.log")])
            )
        for proc, chunk in zip(cluster.procs, chunks):
            _wait_listening(proc, chunk[-1], port, base)
    except BaseException:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
        raise
    return cluster


def _wait_listening(proc: subprocess.Popen[bytes], addr: str, port: int, base: Path) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection((addr, port), timeout=0.5):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                logs = "".join(p.read_text() for p in base.glob("sshd*.log"))
                raise RuntimeError(f"sshd did not come up on {addr}:{port}: {logs[-2000:]}") from None
            time.sleep(0.05)
