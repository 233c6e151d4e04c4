"""A node agent forked from the launcher on this machine, this machine's rendezvous port, and a command run here for
each node: what the runners that run their agents here share (the local runner, one launcher per pod in
``runners/node.py``, the in-step Slurm agent; mpirun's runner picks its port and runs ``--preflight`` here too), so
none of them imports another runner's module.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, ClassVar

from dslaunch import wire
from dslaunch.errors import DslaunchError
from dslaunch.job.protocols import AgentHandle
from dslaunch.oslib import prctl, procs
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.agent.preload.client import Zygote
    from dslaunch.job.protocols import NodeAnswers
    from dslaunch.output.status_line import StatusLine


def _reset_signal_handlers() -> None:
    """Start the forked agent with a fresh interpreter's handlers, not the launcher's."""
    for sig in (
        signal.SIGTERM,
        signal.SIGHUP,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGURG,
        signal.SIGWINCH,
        signal.SIGCONT,  # a --launcher slurm step's stop request is the task's, not its agent's (slurm/in_step.py)
    ):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


class _ForkedAgent:
    """The node agent in a fork of the launcher: no new interpreter, no second round of imports.

    Forking is safe here because the launcher has started no threads yet. The
    child reads control lines on stdin, as a ``python -m dslaunch.agent`` would,
    but writes rank output straight to the launcher's stdout and stderr (no
    second hop) and its events on a pipe of their own, which the launcher always
    reads: no reader of the job's output can hold up an exit or a teardown.
    """

    def __init__(
        self, plan: LaunchPlan, node_rank: int, warm: Mapping[int, Zygote | None] | None, status_line: StatusLine | None
    ) -> None:
        from dslaunch.agent.run_node import Forked, run_node

        in_r, in_w = os.pipe()
        ev_r, ev_w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the agent
            code = 1
            try:
                os.close(in_w)
                os.close(ev_r)
                os.dup2(in_r, 0)
                os.close(in_r)
                _reset_signal_handlers()
                prctl.set_parent_death_signal(signal.SIGTERM)
                if os.getppid() != parent:
                    os._exit(143)
                if plan.cwd:
                    os.chdir(plan.cwd)
                forked = Forked(ev_w, status_line)
                code = run_node(plan, node_rank, control=sys.stdin.buffer, forked=forked, warm=warm)
            except BaseException:  # noqa: BLE001 - report, then leave without running the launcher's code
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(in_r)
        os.close(ev_w)
        self.pid = pid
        self.stdin = os.fdopen(in_w, "wb")
        self.events = os.fdopen(ev_r, "rb")
        self.returncode: int | None = None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG if deadline is not None else 0)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif deadline is not None and time.monotonic() >= deadline:
                return None
            else:
                time.sleep(0.01)
        return self.returncode


class LocalAgent(AgentHandle):
    """A local node agent: stop requests go in on its stdin, events come out on their own pipe.

    An agent that ends without its ``Done`` (SIGKILL, the OOM killer, a crash) did not sweep its node: its ranks
    die with it (parent-death signal), but not what they double-forked, so the launcher sweeps this machine for
    the node's processes once it sees the agent gone, as the remote reaper does (docs/teardown.md); and as the
    launcher is a child subreaper, what they double-forked has become its child: it ends that too, run id or not.
    """

    started: ClassVar[set[int]] = set()  # every agent this launcher forked: its own children, never "adopted"

    def __init__(
        self,
        plan: LaunchPlan,
        node_rank: int,
        warm: Mapping[int, Zygote | None] | None = None,
        status_line: StatusLine | None = None,
    ) -> None:
        """``status_line``: the job's (--status-line), which this agent draws where it is the terminal's one writer."""
        self.node_rank = node_rank
        self.host = plan.node(node_rank).host
        self.run_id = plan.run_id
        self.proc = _ForkedAgent(plan, node_rank, warm, status_line)
        LocalAgent.started.add(self.proc.pid)
        self._zygotes = {z.proc.pid for z in (warm or {}).values() if z is not None and z.proc is not None}
        self._stopped = False
        self._done = False  # the agent sent Done: it has swept its node itself
        self._swept = False
        self._send_lock = threading.Lock()  # a Slurm task's stop channel answers from a thread of its own

    def lines(self) -> Iterator[str]:
        for raw in self.proc.events:
            line = raw.decode("utf-8", "replace")
            if not self._done and isinstance(wire.decode(line), wire.Done):
                self._done = True
            yield line

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.proc.stdin.write(wire.control_stop())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def request_stop(self, signum: int, *, now: bool = False) -> None:
        self._send(wire.control_request_stop(signum, now))

    def stop_at(self, step: int) -> None:
        self._send(wire.control_stop_at(step))

    def _send(self, line: bytes) -> None:
        if self._stopped:
            return  # its stdin is closed: it tears down
        try:
            with self._send_lock:
                self.proc.stdin.write(line)
                self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def signal(self, signum: int) -> None:
        try:
            self.proc.send_signal(signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        # The ranks' parent-death signal takes them down with the agent; wait() sweeps up what they left.
        try:
            self.proc.send_signal(signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float | None) -> int | None:
        status = self.proc.wait(timeout)
        if status is not None and not self._done and not self._swept:
            self._swept = True
            procs.kill_job(self.run_id, self.node_rank)
            procs.kill_adopted(LocalAgent.started | self._zygotes)  # what they left that hides its run id
        return status


def run_here(plan: LaunchPlan, command: str, timeout: float = 60.0) -> NodeAnswers:
    """The shell ``command`` once for each node of ``plan``, on this machine (``Runner.run_on_nodes`` of the runners
    whose agents run here, and of mpirun's, which gives no command to one node)."""
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    def one(_node: object) -> tuple[int | None, str, str]:
        try:
            done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "", f"no answer within {timeout:.0f} s"
        return done.returncode, done.stdout, done.stderr

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(one, plan.nodes))
    return {node.node_rank: answer for node, answer in zip(plan.nodes, answers)}


def port_on_this_machine(addr: str) -> int:
    """A free port for ``--master-port 0`` when the master is this machine (local and MPI runners)."""
    try:
        return free_port(addr)
    except OSError as exc:
        raise DslaunchError(f"cannot pick a free port on {addr!r}: {exc}", option="--master-addr") from None


def check_port_free(addr: str, port: int) -> None:
    """Refuse a rendezvous port another process listens on (two jobs, one port), before any rank starts.

    SO_REUSEADDR, as torch's TCPStore binds: a port left in TIME_WAIT by the last job is still usable.
    """
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return  # the rank reports an address it cannot resolve
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DslaunchError(
                    f"port {port} on {addr} is already in use (another job?): give another --master-port, "
                    "or --master-port 0 for a free one",
                    option="--master-port",
                ) from None


def free_port(host: str = "127.0.0.1") -> int:
    from dslaunch.oslib.ports import listen_port

    return listen_port(host)
