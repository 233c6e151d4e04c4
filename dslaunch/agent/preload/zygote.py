"""``--preload MODULES``: one process per node imports MODULES once, then forks every rank from it.

The agent side (:class:`Zygote`, :func:`start`) never imports the preloaded modules: the zygote is its own
process, ``python -u -m dslaunch.agent.preload.zygote``, started with rank 0's environment and the job's cwd, and a
parent-death signal (it dies with its agent). For each rank the agent sends the rank's argv, environment and
cwd, with its stdin, stdout and stderr as file descriptors (SCM_RIGHTS). The zygote forks twice: the
intermediate child forks the rank and exits, so the rank is re-parented to the nearest child subreaper,
the agent, which then waits for it and holds a pidfd on it exactly as for an exec'd rank. The rank waits
for that re-parenting, then takes the parent-death signal (its parent is the agent now), its own session,
the fds, cwd and environment, and runs the bootstrap's ``main`` with the user script as ``__main__``, as
``python -u -m dslaunch.bootstrap`` would.

A fork is only as good as the state it copies, so the zygote refuses (and every rank is exec'd, with a
one-line warning that says why) when it runs more than one thread, when an accelerator runtime is
initialised in it, or when a module fails to import; the agent execs a rank whose environment differs
from the zygote's in a variable read at import time (:data:`IMPORT_ENV_PREFIXES`). docs/preload.md.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from dslaunch.oslib import prctl

if TYPE_CHECKING:
    from dslaunch.plan import LaunchPlan, NodePlan

# Variables read when a module is imported or a library is loaded (not later, at first use): the OpenMP
# runtimes (libgomp and Intel's read OMP_*/GOMP_*/KMP_* when torch loads them), MKL and OpenBLAS, the
# dynamic loader (LD_*), the interpreter itself (PYTHON*), glibc's allocator tunables (MALLOC_*), and
# torch's import-time settings (TORCH_LOGS, TORCH_CPP_LOG_LEVEL, TORCH_SHOW_CPP_STACKTRACES, PYTORCH_*).
# A rank whose value of any of them differs from the zygote's is exec'd. Not here, on purpose:
# CUDA_VISIBLE_DEVICES and NCCL_* (read when CUDA or NCCL initialises, which happens in the rank),
# and the per-rank names (RANK, LOCAL_RANK, ...), which no module should read at import time; name
# such variables in DSLAUNCH_PRELOAD_ENV (comma-separated names or prefixes ending in ``*``) to have
# them compared too.
IMPORT_ENV_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "LD_", "PYTHON", "MALLOC_", "TORCH_", "PYTORCH_")
EXTRA_ENV_VAR = "DSLAUNCH_PRELOAD_ENV"
_BOOTSTRAP = ("-u", "-m", "dslaunch.bootstrap")  # what rank_argv puts after the interpreter
_MAX_MESSAGE = 1 << 20
WARM_PID_VAR = "DSLAUNCH_ZYGOTE_PID"  # set in the ranks of a warm zygote (zygote_warm.py)
_zygote_pid = 0
# node rank -> the launcher's warm zygote for it (None: it could not start one, and said why), kept for the whole
# job (zygote_warm.py); a node agent forked by the launcher finds its node's zygote here (for_node).
WARM: dict[int, Zygote | None] = {}
_ACCELERATOR_DEVICES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/accel", "/dev/neuron", "/dev/davinci")


_OURS = ("dslaunch.bootstrap.run", "dslaunch.logs")  # what every rank runs first
_ENGINE = tuple(f"dslaunch.bootstrap.{m}" for m in ("engine", "comm", "mesh_build", "timers"))  # with torch


# ---- the agent's side ------------------------------------------------------------------------------------


def import_env_names(env: Mapping[str, str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(exact names, prefixes) compared between the zygote and each rank."""
    names: list[str] = []
    prefixes = list(IMPORT_ENV_PREFIXES)
    for raw in env.get(EXTRA_ENV_VAR, "").split(","):
        item = raw.strip()
        if item.endswith("*"):
            prefixes.append(item[:-1])
        elif item:
            names.append(item)
    return tuple(names), tuple(prefixes)


def env_difference(zygote_env: Mapping[str, str], rank_env: Mapping[str, str]) -> str | None:
    """The first import-time variable whose value differs between the two environments, or None."""
    names, prefixes = import_env_names(zygote_env)
    for key in sorted({*zygote_env, *rank_env}):
        if (key in names or key.startswith(prefixes)) and zygote_env.get(key) != rank_env.get(key):
            return key
    return None


class ForkedRank:
    """What the node loop needs of a ``Popen`` for a rank that the zygote forked (and the agent adopted).

    A rank of a warm zygote (``status`` given) is not the agent's child but its waiter's, which writes the rank's
    exit code on the ``status`` pipe (zygote_warm.py)."""

    def __init__(
        self, pid: int, stdout: IO[bytes], stderr: IO[bytes], status: int | None = None, waiter: int | None = None
    ) -> None:
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.status = status
        self.waiter = waiter
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self._wait(os.WNOHANG)

    def wait(self) -> int:
        code = self._wait(0)
        assert code is not None
        return code

    def _wait(self, flags: int) -> int | None:
        if self.returncode is None and self.status is not None:
            from dslaunch.agent.preload.waiter import read_status

            self.returncode = read_status(self.status, block=flags == 0)
        elif self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:  # reaped elsewhere: as Popen, which then reports 0
                self.returncode = 0
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


@dataclass
class Zygote:
    proc: Any  # subprocess.Popen
    sock: socket.socket
    env: dict[str, str]
    label: str  # "--preload torch on HOST", for warnings
    warm: bool = False  # started by the launcher for every attempt of the job (zygote_warm.py)

    def spawn(self, argv: Sequence[str], env: Mapping[str, str], cwd: str | None, rank: int) -> ForkedRank | None:
        """Fork one rank from the zygote; None (after a one-line warning) when it must be exec'd instead."""
        if self.proc is None:
            return None
        if list(argv[1:4]) != list(_BOOTSTRAP) or argv[0] != self.proc.args[0]:
            self._fallback(f"its command is not the Python bootstrap ({argv[0]})", rank=rank)
            return None
        differs = env_difference(self.env, env)
        if differs is not None:
            self._fallback(
                f"{differs} differs from the preloaded process's, and is read at import time",
                rank=rank,
            )
            return None
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe() if self.warm else (-1, -1)
        ours, theirs = [out_r, err_r, status_r], [os.open(os.devnull, os.O_RDONLY), out_w, err_w, status_w]
        request = {"argv": list(argv[4:]), "env": dict(env), "cwd": cwd or "", "agent": os.getpid()}
        try:
            reply = exchange(self.sock, request, [fd for fd in theirs if fd >= 0])
        except (OSError, ValueError) as exc:
            reply = {"fallback": f"the preloaded process is gone ({exc})"}
        finally:
            for fd in theirs:
                if fd >= 0:
                    os.close(fd)
        pid = reply.get("pid")
        if not isinstance(pid, int):
            for fd in ours:
                if fd >= 0:
                    os.close(fd)
            self._fallback(str(reply.get("fallback") or "the preloaded process is gone"), rank=None)
            return None
        out, err = open(out_r, "rb", buffering=0), open(err_r, "rb", buffering=0)
        if not self.warm:
            return ForkedRank(pid, out, err)
        return ForkedRank(pid, out, err, status_r, reply.get("waiter"))

    def _fallback(self, why: str, rank: int | None) -> None:
        whom = "this node's ranks" if rank is None else f"rank {rank}"
        print(f"dslaunch: warning: {self.label}: {whom} exec'd instead: {why}", file=sys.stderr, flush=True)
        if rank is None:
            self.close()

    def close(self) -> None:
        """End the zygote (its ranks are on their own): EOF makes it exit at once. An agent's copy of a warm
        zygote only lets go of it: the launcher ends it, with the job (zygote_warm.py)."""
        if self.proc is None:
            return
        self.sock.close()
        if self.warm and os.getpid() != self.proc_owner():
            self.proc = None
            return
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a zygote that does not go is killed
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def proc_owner(self) -> int:
        """The pid of the process that started the zygote (its parent)."""
        return int(getattr(self.proc, "owner", -1))


def exchange(sock: socket.socket, request: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
    """Send one request (with ``fds``), return its reply; a reply to an earlier request (of an agent killed
    while it waited: a warm zygote outlives its agents) is skipped."""
    global _requests
    _requests += 1
    request = {**request, "id": f"{os.getpid()}:{_requests}"}
    socket.send_fds(sock, [json.dumps(request).encode()], list(fds))
    while True:
        reply = json.loads(sock.recv(_MAX_MESSAGE) or b'{"id": null}')
        if not isinstance(reply, dict):
            return {}
        if reply.get("id") in (request["id"], None):
            return reply


_requests = 0


def start(
    modules: Sequence[str],
    python: str,
    env: Mapping[str, str],
    cwd: str | None,
    host: str,
    *,
    warm: bool = False,
) -> Zygote | None:
    """Start this node's zygote and wait until it has imported ``modules``; None (after a warning) if it cannot serve.

    The caller is a child subreaper (the forked ranks become its children), or, ``warm``, the launcher: then each
    rank's waiter is its parent (zygote_warm.py)."""
    import subprocess

    label = f"--preload {','.join(modules)} on {host}"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (ours, theirs):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _MAX_MESSAGE)
    zygote = Zygote(None, ours, dict(env), label, warm)
    prctl.load()
    args = [str(theirs.fileno()), str(os.getpid()), ",".join(modules), *(["warm"] if warm else [])]
    try:
        proc = subprocess.Popen(
            [python, *_BOOTSTRAP[:2], __name__, *args],
            env=_process_env(env, warm),
            cwd=cwd or None,
            stdin=subprocess.DEVNULL,
            stdout=2,  # fd 1 may carry the agent's events: what the imports print goes to stderr
            stderr=2,
            pass_fds=(theirs.fileno(),),
            preexec_fn=_zygote_preexec,
        )
    except OSError as exc:
        theirs.close()
        zygote._fallback(f"cannot start the preloaded process: {exc}", rank=None)
        return None
    theirs.close()
    proc.owner = os.getpid()  # type: ignore[attr-defined]
    zygote.proc = proc
    try:
        reply = json.loads(ours.recv(_MAX_MESSAGE) or b"{}")
    except (OSError, ValueError):
        reply = {}
    if not isinstance(reply, dict) or reply.get("ready") is not True:
        why = reply.get("fallback") if isinstance(reply, dict) else None
        zygote._fallback(str(why or f"the preloaded process exited ({proc.poll()})"), rank=None)
        return None
    return zygote


def _process_env(env: Mapping[str, str], warm: bool) -> dict[str, str]:
    """The zygote's own environment: a warm one is no process of any one attempt's node, so it lacks
    ``NODE_RANK``, which each attempt's end sweeps by (procs.kill_job); the launcher ends it, with the job."""
    return {k: v for k, v in env.items() if not (warm and k == "NODE_RANK")}


def for_node(plan: LaunchPlan, node: NodePlan, base: Mapping[str, str], error_dir: str) -> Zygote | None:
    """This node's zygote when the plan preloads and it can serve; else None (with a warning when it was asked)."""
    from dslaunch.agent import ranks

    if not plan.preload or plan.program.no_python:  # the CLI warned about --no-python
        return None
    if node.node_rank in WARM:  # the launcher keeps one for the whole job (None: it could not start one)
        return WARM[node.node_rank]
    label = f"--preload {','.join(plan.preload)} on {node.host}"
    why = None
    if plan.bind_cores is not None:
        why = "--bind-cores-to-rank runs each rank under numactl"
    elif not prctl.set_child_subreaper():
        why = "the agent cannot be a child subreaper here, so it could not wait for forked ranks"
    if why is not None:
        print(f"dslaunch: warning: {label}: this node's ranks exec'd instead: {why}", file=sys.stderr, flush=True)
        return None
    env = ranks.rank_env(plan, node, 0, base, os.path.join(error_dir, "preload.error.json"))
    return start(plan.preload, plan.program.python, env, plan.cwd, node.host)


def _zygote_preexec() -> None:  # between fork and exec: prctl was resolved before the fork
    prctl.set_parent_death_signal(signal.SIGKILL)


# ---- the zygote's side -----------------------------------------------------------------------------------


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
class _Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]  # stdin, stdout, stderr, and (warm) the exit-status pipe
    agent: int
    id: object = None


def serve(sock: socket.socket, modules: Sequence[str], warm: bool = False) -> _Request | None:
    """Import, check, then fork ranks until the agent closes the socket. Returns only in a forked rank."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - any failure means: exec instead
            _send(sock, fallback=f"cannot import {name}: {type(exc).__name__}: {exc}")
            return None
    for name in _OURS + (_ENGINE if "torch" in sys.modules else ()):
        importlib.import_module(name)
    prctl.load()  # each rank sets its parent-death signal: resolve prctl once, here
    if warm:
        from dslaunch.agent.preload import waiter

        waiter.prepare_zygote()
    why = fork_blocker()
    if why is not None:
        _send(sock, fallback=why)
        return None
    _send(sock, ready=True)
    while True:
        msg, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 4)
        if not msg:
            return None
        request = _answer(sock, json.loads(msg), fds, warm)
        if request is not None:
            return request


def _answer(sock: socket.socket, data: dict[str, Any], fds: list[int], warm: bool) -> _Request | None:
    """One request: a check (warm: may this zygote serve another attempt?) or a rank to fork."""
    why = fork_blocker()
    if data.get("check") or why is not None or len(fds) != (4 if warm else 3):
        for fd in fds:
            os.close(fd)
        if data.get("check") and why is None:
            _send(sock, id=data.get("id"), ok=True)
        else:
            _send(sock, id=data.get("id"), fallback=why or "the agent sent a bad request")
        return None
    request = _Request(data["argv"], data["env"], data["cwd"], fds, data["agent"], data.get("id"))
    pid, waiter = _fork_rank(sock, request, warm)
    if pid == 0:
        return request
    for fd in fds:
        os.close(fd)
    reply = {"pid": pid, "waiter": waiter} if pid > 0 else {"fallback": "fork failed"}
    _send(sock, id=request.id, **reply)
    return None


def _fork_rank(sock: socket.socket, request: _Request, warm: bool) -> tuple[int, int]:
    """Double-fork: (the rank's pid, the intermediate's) here, 0 in the rank, -1 on failure. The intermediate
    exits at once (the rank becomes the agent's child), or, warm, stays as the rank's waiter (zygote_warm.py)."""
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
        if warm:
            from dslaunch.agent.preload import waiter

            waiter.become_waiter()
        try:
            pid = os.fork()
        except OSError:
            os._exit(1)
        if pid == 0:
            os.close(w)
            _become_rank(sock, request, middle_pid=me, warm=warm)
            return 0, 0
        os.write(w, str(pid).encode())
        os.close(w)
        if warm:
            waiter.wait_as_waiter(pid, request.agent, request.fds, sock)
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 64):
        data += chunk
    os.close(r)
    if not warm:
        os.waitpid(middle, 0)  # once it is reaped, the rank is the agent's child
    return (int(data) if data else -1), middle


def _become_rank(sock: socket.socket, request: _Request, middle_pid: int, warm: bool = False) -> None:
    """In the forked rank: what Popen and _rank_preexec give an exec'd rank."""
    import time

    sock.close()
    os.setsid()
    deadline = time.monotonic() + 30
    while not warm and os.getppid() == middle_pid:  # the intermediate exits; the parent-death signal waits for that
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
        os.environ[WARM_PID_VAR] = str(_zygote_pid)
    random = sys.modules.get("numpy.random")
    if random is not None:  # numpy seeded its global generator at import: each rank gets its own, as when exec'd
        random.seed()


def main(argv: list[str]) -> int:
    fd, owner, modules = int(argv[0]), int(argv[1]), [m for m in argv[2].split(",") if m]
    warm = argv[3:] == ["warm"]
    global _zygote_pid
    _zygote_pid = os.getpid()
    sock = socket.socket(fileno=fd)
    if os.getppid() != owner:  # the agent (warm: the launcher) died before our parent-death signal was set
        return 1
    request = serve(sock, modules, warm)
    if request is None:
        if warm:
            from dslaunch.agent.preload import waiter

            waiter.outlive_waiters()
        os._exit(0)  # skip tearing down what was imported: the agent does not wait for it
    from dslaunch.bootstrap.run import main as bootstrap

    bootstrap(request.argv)  # never returns: the bootstrap ends the rank with os._exit, as an exec'd one
    return 0


def _send(sock: socket.socket, **message: object) -> None:
    sock.send(json.dumps(message).encode())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
