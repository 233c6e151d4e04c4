"""``--preload MODULES``, the agent's side: start this node's zygote (:func:`for_node`, :func:`start`) and ask it
for ranks (:class:`Zygote`).

The agent never imports the preloaded modules: the zygote is its own process (server.py), started with rank 0's
environment and the job's cwd, and a parent-death signal (it dies with its agent). For each rank the agent sends
the rank's argv, environment and cwd, with its stdin, stdout and stderr as file descriptors (protocol.py), and
gets back the pid of a rank that is its child, as an exec'd rank is (:class:`ForkedRank`).

A fork is only as good as the state it copies: the zygote refuses when it is unsafe to fork (server.py), and the
agent execs a rank whose environment differs from the zygote's in a variable read at import time
(:data:`IMPORT_ENV_PREFIXES`), or whose command is not the Python bootstrap. docs/preload.md.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from dslaunch.agent.preload import protocol
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
    exit code on the ``status`` pipe (warm.py, waiter.py)."""

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
    """The agent's (or, warm, the launcher's) handle on one node's zygote."""

    proc: Any  # subprocess.Popen
    sock: socket.socket
    env: dict[str, str]
    label: str  # "--preload torch on HOST", for warnings
    warm: bool = False  # started by the launcher for every attempt of the job (warm.py)
    sent: int = 0  # requests sent from this process's copy: with the pid, each request's id
    owner: int = -1  # the pid of the process that started it (its parent), once started

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
            reply = self.request(request, [fd for fd in theirs if fd >= 0])
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

    def request(self, message: dict[str, Any], fds: Sequence[int] = ()) -> dict[str, Any]:
        """Send one request (with ``fds``), return its reply (protocol.exchange)."""
        self.sent += 1
        return protocol.exchange(self.sock, message, f"{os.getpid()}:{self.sent}", fds)

    def _fallback(self, why: str, rank: int | None) -> None:
        whom = "this node's ranks" if rank is None else f"rank {rank}"
        print(f"dslaunch: warning: {self.label}: {whom} exec'd instead: {why}", file=sys.stderr, flush=True)
        if rank is None:
            self.close()

    def close(self) -> None:
        """End the zygote (its ranks are on their own): EOF makes it exit at once. An agent's copy of a warm
        zygote only lets go of it: the launcher ends it, with the job (warm.py)."""
        if self.proc is None:
            return
        self.sock.close()
        if self.warm and os.getpid() != self.owner:
            self.proc = None
            return
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - a zygote that does not go is killed
            self.proc.kill()
            self.proc.wait()
        self.proc = None


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
    rank's waiter is its parent (warm.py)."""
    import subprocess

    label = f"--preload {','.join(modules)} on {host}"
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for s in (ours, theirs):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, protocol.MAX_MESSAGE)
    zygote = Zygote(None, ours, dict(env), label, warm)
    prctl.load()
    args = protocol.server_args(theirs.fileno(), os.getpid(), modules, warm)
    try:
        proc = subprocess.Popen(
            [python, *_BOOTSTRAP[:2], protocol.SERVER_MODULE, *args],
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
    zygote.proc, zygote.owner = proc, os.getpid()
    try:
        reply = protocol.receive(ours)
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


def for_node(
    plan: LaunchPlan,
    node: NodePlan,
    base: Mapping[str, str],
    error_dir: str,
    warm: Mapping[int, Zygote | None] | None = None,
) -> Zygote | None:
    """This node's zygote when the plan preloads and it can serve; else None (with a warning when it was asked).

    ``warm``: the zygotes the launcher keeps for the whole job, by node rank (warm.py), handed down to this agent
    (a fork of the launcher); a node in it gets its kept zygote, or None when the launcher could not start one."""
    from dslaunch.agent import ranks

    if not plan.preload or plan.program.no_python:  # the CLI warned about --no-python
        return None
    if warm is not None and node.node_rank in warm:  # None: the launcher could not start one, and said why
        return warm[node.node_rank]
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
