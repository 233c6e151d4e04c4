"""Pods for the tests: one dslaunch per "pod", configured as Kubeflow configures torchrun (PET_* only), on
loopback or, with ``prefix``, inside a network namespace."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from dslaunch.oslib.ports import listen_port
from tests.helpers import DSLAUNCH, SCRIPTS, wait_until_gone

JOB = str(SCRIPTS / "job.py")
SECRET = "pod-test-secret"


def free_port_pair() -> int:
    """A port P with P and P+1 free (the rendezvous, and the pods' control channel after it)."""
    for _ in range(50):
        port = listen_port("127.0.0.1")  # outside the ephemeral range: no test's outgoing connection takes it
        if port < 65535:
            with socket.socket() as s:
                try:
                    s.bind(("", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no two free ports in a row")


def pod_env(
    node_rank: int, port: int, run_id: str, *, nnodes: int = 2, addr: str = "127.0.0.1", **extra: str
) -> dict[str, str]:
    return {
        **os.environ,
        "PET_NNODES": str(nnodes),
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": "2",
        "PET_MASTER_ADDR": addr,
        "PET_MASTER_PORT": str(port),
        "PET_RDZV_ID": run_id,
        "PET_RDZV_CONF": "join_timeout=20",
        "DSLAUNCH_JOB_SECRET": SECRET,
        "CUDA_VISIBLE_DEVICES": "",
        **extra,
    }


def elastic_env(port: int, run_id: str, nnodes: str, **extra: str) -> dict[str, str]:
    """A pod of an elastic job (torchrun's c10d shape): no node rank, the pods meet at the endpoint."""
    env = pod_env(0, port, run_id)
    env.update(PET_NNODES=nnodes, PET_RDZV_BACKEND="c10d", **extra)
    del env["PET_NODE_RANK"], env["PET_MASTER_ADDR"]
    env["PET_RDZV_ENDPOINT"] = f"127.0.0.1:{port + 1}"
    return env


def start_pod(
    env: dict[str, str], args: Sequence[str], *, prefix: Sequence[str] = (), cwd: Path | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*prefix, *DSLAUNCH, "--shutdown-timeout", "2", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def finish(pods: Sequence[subprocess.Popen[str]], timeout: float = 60) -> list[tuple[int, str, str]]:
    """Each pod's exit code, stdout and stderr; any pod still running at the timeout is killed."""
    deadline = time.monotonic() + timeout
    results = []
    for pod in pods:
        try:
            out, err = pod.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(pod.pid, signal.SIGKILL)
            out, err = pod.communicate()
        results.append((pod.returncode, out, err))
    return results


def launcher_pid(pod: subprocess.Popen[str]) -> int:
    """The dslaunch process itself (the pod's first process, even under ``ip netns exec``)."""
    return pod.pid


def nothing_left(run_id: str) -> list[str]:
    return [" ".join(p.cmdline()) for p in wait_until_gone(run_id, 15)]


class PodController:
    """A small stand-in for Kubernetes: runs one pod per spec and, when one is deleted, recreates it with the same
    spec (a pod restart policy, or a Job's controller replacing a deleted pod keeps its name and its env)."""

    def __init__(self, specs: Sequence[tuple[dict[str, str], Sequence[str]]], cwd: Path, gap: float = 0.0) -> None:
        self.specs = list(specs)
        self.cwd = cwd
        self.pods: list[subprocess.Popen[str]] = []
        for env, args in self.specs:
            self.pods.append(start_pod(env, args, cwd=cwd))
            time.sleep(gap)

    def delete(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Delete pod ``index`` (``sig`` to its whole process group: SIGKILL a forced delete, SIGTERM a graceful
        one) and recreate it once it is gone."""
        os.killpg(self.pods[index].pid, sig)
        self.pods[index].wait(30)
        env, args = self.specs[index]
        self.pods[index] = start_pod(env, args, cwd=self.cwd)

    def finish(self, timeout: float = 60) -> list[tuple[int, str, str]]:
        return finish(self.pods, timeout)


class Flood:
    """``count`` clients without the secret that connect, send nothing, and reconnect as soon as they are dropped,
    for at most ``seconds`` (all on loopback, one thread)."""

    def __init__(self, port: int, count: int, seconds: float) -> None:
        self.port, self.count, self.until = port, count, time.monotonic() + seconds
        self.connections = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _connect(self, sel: selectors.BaseSelector) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=1)
        except OSError:
            return
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
        self.connections += 1

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for _ in range(self.count):
            self._connect(sel)
        while not self._stop.is_set() and time.monotonic() < self.until:
            for key, _ in sel.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:  # dropped: back at once
                    sel.unregister(sock)
                    sock.close()
                    self._connect(sel)
            while len(sel.get_map()) < self.count and time.monotonic() < self.until:
                self._connect(sel)
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)
