"""A real sshd on loopback aliases (127.0.0.2...), with private keys, known_hosts and ssh config."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
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
    proc: subprocess.Popen[bytes] | None = None

    def hostfile(self, hosts: list[str], slots: int = 1, name: str = "hostfile") -> Path:
        path = self.base / name
        path.write_text("".join(f"{h} slots={slots}\n" for h in hosts))
        return path

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_cluster(addrs: tuple[str, ...] = ADDRS) -> SshCluster:
    """sshd on ``addrs`` (aliases node1.. in the ssh config); the caller stops it."""
    sshd = need("sshd")
    need("ssh-keygen")
    base = Path(tempfile.mkdtemp(prefix="dslaunch-ssh-"))
    os.chmod(base, 0o700)
    port = free_port(addrs[0])
    _keygen(base / "host_key")
    _keygen(base / "id")
    (base / "authorized_keys").write_text((base / "id.pub").read_text())
    listen = "".join(f"ListenAddress {a}\n" for a in addrs)
    (base / "sshd_config").write_text(
        f"Port {port}\n{listen}HostKey {base}/host_key\nPidFile {base}/sshd.pid\n"
        f"AuthorizedKeysFile {base}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        "AcceptEnv LANG LC_*\nMaxStartups 200:30:300\nMaxSessions 200\nLogLevel VERBOSE\n"
    )
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
    proc = subprocess.Popen([sshd, "-D", "-f", str(base / "sshd_config"), "-E", str(base / "sshd.log")])
    cluster = SshCluster(base, port, aliases, base / "ssh_config", base / "known_hosts", proc)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addrs[-1], port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd exited: {(base / 'sshd.log').read_text()}") from None
            time.sleep(0.05)
    return cluster
