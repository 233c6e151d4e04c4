"""``--preload MODULES``, the zygote's side: ``python -u -m dslaunch.agent.preload.server``, one process per node
that imports MODULES once, then forks every rank from it (its agent's side: client.py; what they say: protocol.py).

For each rank the zygote forks twice: the intermediate child forks the rank and exits, so the rank is re-parented
to the nearest child subreaper, the agent, which then waits for it and holds a pidfd on it exactly as for an exec'd
rank. The rank waits for that re-parenting, then takes the parent-death signal (its parent is the agent now), its
own session, the fds, cwd and environment, and runs the bootstrap's ``main`` with the user script as ``__main__``,
as ``python -u -m dslaunch.bootstrap`` would. A warm zygote (warm.py) keeps the intermediate as the rank's waiter
(waiter.py).

A fork is only as good as the state it copies, so the zygote refuses (and every rank is exec'd, with a one-line
warning that says why) when it runs more than one thread, when an accelerator runtime is initialised in it, or when
a module fails to import (:func:`fork_blocker`). docs/preload.md.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dslaunch.agent.preload import protocol
from dslaunch.oslib import prctl

WARM_PID_VAR = "DSLAUNCH_ZYGOTE_PID"  # set in the ranks of a warm zygote (warm.py)
_ACCELERATOR_DEVICES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/accel", "/dev/neuron", "/dev/davinci")
_OURS = ("dslaunch.bootstrap.run", "dslaunch.logs")  # what every rank runs first
_ENGINE = tuple(f"dslaunch.bootstrap.{m}" for m in ("engine", "comm", "mesh_build", "timers"))  # with torch


def fork_blocker() -> str | None:
    """Why this process must not fork ranks now, or None."""
    threads = len(os.listdir("/proc/self/task"))
    if threads > 1:
        return f"the preloaded process runs {threads} threads (a fork copies only one): a preloaded module started them"
    torch = sys.modules.get("torch")
    for name in ("cuda", "xpu", "mtia", "mps"):
        backend = getattr(torch, name, None) if torch is not None else None
        check = getattr(backend, "is_initialized", None)
        try:
            initialised = bool(check()) if callable(check) else False
        except Exception:  # noqa: BLE001 - a backend that cannot say is not initialised by us
            initialised = False
        if initialised:
            return f"torch.{name} is initialised in the preloaded process (an accelerator runtime cannot be forked)"
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(_ACCELERATOR_DEVICES):
            return f"the preloaded process holds {target} open (an accelerator runtime does not survive fork)"
    return None


@dataclass
class Server:
    """The zygote: its socket to the agent (warm: the launcher), whether it is warm, and its own pid, which the
    ranks of a warm zygote are told. What a forked rank needs of it travels in this object, not in module globals."""

    sock: socket.socket
    warm: bool
    pid: int

    def serve(self, modules: Sequence[str]) -> protocol.Request | None:
        """Import, check, then fork ranks until the agent closes the socket. Returns only in a forked rank."""
        import importlib

        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - any failure means: exec instead
                protocol.send(self.sock, fallback=f"cannot import {name}: {type(exc).__name__}: {exc}")
                return None
        for name in _OURS + (_ENGINE if "torch" in sys.modules else ()):
            importlib.import_module(name)
        prctl.load()  # each rank sets its parent-death signal: resolve prctl once, here
        if self.warm:
            from dslaunch.agent.preload import waiter

            waiter.prepare_zygote()
        why = fork_blocker()
        if why is not None:
            protocol.send(self.sock, fallback=why)
            return None
        protocol.send(self.sock, ready=True)
        while True:
            msg, fds, _flags, _addr = socket.recv_fds(self.sock, protocol.MAX_MESSAGE, 4)
            if not msg:
                return None
            request = self._answer(json.loads(msg), fds)
            if request is not None:
                return request

    def _answer(self, data: dict[str, Any], fds: list[int]) -> protocol.Request | None:
        """One request: a check (warm: may this zygote serve another attempt?) or a rank to fork."""
        why = fork_blocker()
        if data.get("check") or why is not None or len(fds) != (4 if self.warm else 3):
            for fd in fds:
                os.close(fd)
            if data.get("check") and why is None:
                protocol.send(self.sock, id=data.get("id"), ok=True)
            else:
                protocol.send(self.sock, id=data.get("id"), fallback=why or "the agent sent a bad request")
            return None
        request = protocol.Request.from_message(data, fds)
        pid, waiter = self._fork_rank(request)
        if pid == 0:
            return request
        for fd in fds:
            os.close(fd)
        reply = {"pid": pid, "waiter": waiter} if pid > 0 else {"fallback": "fork failed"}
        protocol.send(self.sock, id=request.id, **reply)
        return None

    def _fork_rank(self, request: protocol.Request) -> tuple[int, int]:
        """Double-fork: (the rank's pid, the intermediate's) here, 0 in the rank, -1 on failure. The intermediate
        exits at once (the rank becomes the agent's child), or, warm, stays as the rank's waiter (waiter.py)."""
        r, w = os.pipe()
        try:
            middle = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return -1, -1
        if middle == 0:  # the intermediate: fork the rank, tell its pid, leave it to the subreaper (or wait for it)
            os.close(r)
            me = os.getpid()
            if self.warm:
                from dslaunch.agent.preload import waiter

                waiter.become_waiter()
            try:
                pid = os.fork()
            except OSError:
                os._exit(1)
            if pid == 0:
                os.close(w)
                self._become_rank(request, middle_pid=me)
                return 0, 0
            os.write(w, str(pid).encode())
            os.close(w)
            if self.warm:
                waiter.wait_as_waiter(pid, request.agent, request.fds, self.sock)
            os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 64):
            data += chunk
        os.close(r)
        if not self.warm:
            os.waitpid(middle, 0)  # once it is reaped, the rank is the agent's child
        return (int(data) if data else -1), middle

    def _become_rank(self, request: protocol.Request, middle_pid: int) -> None:
        """In the forked rank: what Popen and _rank_preexec give an exec'd rank."""
        import time

        warm = self.warm
        self.sock.close()
        os.setsid()
        deadline = time.monotonic() + 30
        while not warm and os.getppid() == middle_pid:  # the intermediate exits; the parent-death signal waits
            if time.monotonic() > deadline:
                os._exit(1)
            time.sleep(0.0002)
        prctl.set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != (middle_pid if warm else request.agent):
            os._exit(1)  # the agent (warm: the waiter) is gone: as a rank whose parent died
        for target, fd in enumerate(request.fds[:3]):
            os.dup2(fd, target)
        for fd in request.fds:
            if fd > 2:
                os.close(fd)
        if request.cwd:
            os.chdir(request.cwd)
        os.environ.clear()
        os.environ.update(request.env)
        if warm:  # which zygote forked it: the same one in every attempt, unless it was replaced
            os.environ[WARM_PID_VAR] = str(self.pid)
        random = sys.modules.get("numpy.random")
        if random is not None:  # numpy seeded its global generator at import: each rank gets its own, as when exec'd
            random.seed()


def main(argv: list[str]) -> int:
    fd, owner, modules, warm = protocol.parse_server_args(argv)
    server = Server(socket.socket(fileno=fd), warm, os.getpid())
    if os.getppid() != owner:  # the agent (warm: the launcher) died before our parent-death signal was set
        return 1
    request = server.serve(modules)
    if request is None:
        if warm:
            from dslaunch.agent.preload import waiter

            waiter.outlive_waiters()
        os._exit(0)  # skip tearing down what was imported: the agent does not wait for it
    from dslaunch.bootstrap.run import main as bootstrap

    bootstrap(request.argv)  # never returns: the bootstrap ends the rank with os._exit, as an exec'd one
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
