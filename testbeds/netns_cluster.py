"""Two "hosts" with distinct hostnames and addresses: network namespaces on a private bridge, sshd in each.

Everything lives on a /24 that exists only on this bridge and inside the namespaces (no default route),
and is removed again by :meth:`NetnsCluster.stop`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster, need

_SERIAL = itertools.count()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass
class NetnsCluster:
    tag: str
    subnet: str  # "10.215.N"
    names: tuple[str, ...]  # hostnames node1, node2 inside the namespaces
    config: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def addr(self, i: int) -> str:
        return f"{self.subnet}.{i + 2}"

    def ns(self, i: int) -> str:
        return f"{self.tag}n{i}"

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for i in range(len(self.names)):
            # An sshd session whose client was cut off (a partition test) outlives its daemon with no keepalive.
            pids = subprocess.run(["ip", "netns", "pids", self.ns(i)], capture_output=True, text=True, timeout=10)
            for pid in pids.stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            # Deleting a namespace frees its veth pair asynchronously: delete our end first, which is synchronous.
            subprocess.run(["ip", "link", "del", f"{self.tag}h{i}"], capture_output=True, timeout=10)
            subprocess.run(["ip", "netns", "del", self.ns(i)], capture_output=True, timeout=10)
            shutil.rmtree(f"/etc/netns/{self.ns(i)}", ignore_errors=True)
        subprocess.run(["ip", "link", "del", f"{self.tag}br"], capture_output=True, timeout=10)


def start_netns(ssh: SshCluster, count: int = 2) -> NetnsCluster:
    need("ip")
    need("unshare")
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("network namespaces need root, and CI is set")
        pytest.skip("network namespaces need root")
    tag = f"dr{os.getpid() % 10000}{next(_SERIAL)}"  # one per cluster: several modules may start one each
    subnet = f"10.215.{random.randint(10, 250)}"
    names = tuple(f"node{i + 1}" for i in range(count))
    config = ssh.base / f"ssh_config_{tag}"
    cluster = NetnsCluster(tag, subnet, names, config)
    try:
        _ip("link", "add", f"{tag}br", "type", "bridge")
        _ip("addr", "add", f"{subnet}.1/24", "dev", f"{tag}br")
        _ip("link", "set", f"{tag}br", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{cluster.addr(i)} {n}\n" for i, n in enumerate(names))
        host_pub = (ssh.base / "host_key.pub").read_text().split()
        known = ssh.base / f"known_hosts_{tag}"
        known.write_text("".join(f"[{cluster.addr(i)}]:{ssh.port} {host_pub[0]} {host_pub[1]}\n" for i in range(count)))
        for i, name in enumerate(names):
            ns, vh, vn = cluster.ns(i), f"{tag}h{i}", f"{tag}v{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", vh, "type", "veth", "peer", "name", vn)
            _ip("link", "set", vh, "master", f"{tag}br")
            _ip("link", "set", vh, "up")
            _ip("link", "set", vn, "netns", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{cluster.addr(i)}/24", "dev", vn)
            _ip("-n", ns, "link", "set", vn, "up")
            os.makedirs(f"/etc/netns/{ns}", exist_ok=True)
            Path(f"/etc/netns/{ns}/hosts").write_text(hosts)
            sshd_config = ssh.base / f"sshd_config_{ns}"
            sshd_config.write_text(
                "\n".join(
                    line
                    for line in (ssh.base / "sshd_config").read_text().splitlines()
                    if not line.startswith(("ListenAddress", "PidFile"))
                )
                + f"\nListenAddress {cluster.addr(i)}\nPidFile {ssh.base}/sshd_{ns}.pid\n"
                # No ClientAliveInterval (OpenSSH's default): a cut-off agent must find its launcher gone on its
                # own (docs/teardown.md), not by its sshd ending the session.
            )
            cluster.procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        "unshare",
                        "--uts",
                        "sh",
                        "-c",
                        f'hostname {name} && exec /usr/sbin/sshd -D -f "$0" -E "$1"',
                        str(sshd_config),
                        str(ssh.base / f"sshd_{ns}.log"),
                    ]
                )
            )
        config.write_text(
            "".join(f"Host {n}\n    HostName {cluster.addr(i)}\n" for i, n in enumerate(names))
            + ssh.config.read_text()
            .split("Host *", 1)[1]
            .join(["Host *", ""])
            .replace(str(ssh.known_hosts), str(known))
        )
        _wait_listening(cluster, ssh.port)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_listening(cluster: NetnsCluster, port: int) -> None:
    import socket

    for i in range(len(cluster.names)):
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection((cluster.addr(i), port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
