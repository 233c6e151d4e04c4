"""Spawn one node's ranks and run them in a single selector loop: the I/O around ``agent/node_state.py``.

Every rank is its own session (a teardown's signal reaches its children too; a requested stop's, its main process
alone) and carries a parent-death signal, so nothing survives a SIGKILLed agent. The agent is a child subreaper:
what a rank double-forks (a ``setsid`` daemon) becomes the agent's child, and is killed when the ranks are done, as
is anything of the job's still left on this node (docs/teardown.md). The loop wakes on rank output, rank exit
(pidfd), the control channel, signals and the output sinks, tells :class:`NodeState` what happened and executes
what it answers; it decides nothing itself. Rank output is ``output/pump.py``'s: the loop never blocks on a reader,
and stops reading a rank while its sink is full (docs/output.md).
"""

from __future__ import annotations

import os
import selectors
import signal
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, BinaryIO

from dslaunch import wire
from dslaunch.agent import node_state as ns
from dslaunch.agent import ranks as rankspec
from dslaunch.agent.failures import ErrorRecord, keep_tail, read_error_file, tail_lines
from dslaunch.agent.node_io import (
    CaughtSignals,
    fresh_error_file,
    fs_clock_offset,
    kill_descendants,
    killpg,
    log_debug,
    pidfd_of,
    popen_rank,
    read_ready,
    record_exit,
    signal_pid,
    write_all,
)
from dslaunch.agent.rank_exits import DeathWindow
from dslaunch.agent.stop_pages import StopPages, carry_out
from dslaunch.agent.watch import ProgressWatch
from dslaunch.errors import assert_never
from dslaunch.logs import get_logger, phases
from dslaunch.oslib import prctl, procs
from dslaunch.oslib.owner_only import private_dir, private_open
from dslaunch.output.prefix import output_prefix
from dslaunch.output.pump import OutputPump, SinkWriter
from dslaunch.output.sink import STALL
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.agent.preload.client import Zygote

_PID_POLL = 0.05  # a rank without a pidfd is polled this often
_SIDE_COMMANDS = (wire.StopAt, wire.StopRequest)  # what a dial-back carries besides "stop" (watch_side)


@dataclass
class _RankProcess:
    """A started rank as the loop knows it: its process, error file, log files and stderr tail."""

    rank: int
    local_rank: int
    proc: Any  # subprocess.Popen, or zygote.ForkedRank
    pid: int
    pidfd: int | None
    prefix: bytes
    error_file: str
    stdout_log: IO[bytes] | None = None
    stderr_log: IO[bytes] | None = None
    tail: bytes = b""  # the last failures.TAIL_BYTES of its stderr
    reaped: bool = False


class NodeLoop:
    signals: CaughtSignals  # from start() until the sweep at run()'s end

    def __init__(
        self,
        plan: LaunchPlan,
        node_rank: int,
        *,
        control: BinaryIO | None,
        out: int,
        err: int,
        events: int | None = None,
    ) -> None:
        """Rank output goes to the fds ``out`` and ``err``; events to ``events``, else before ``out``'s output."""
        self.plan = plan
        self.node = plan.node(node_rank)
        self.control = control
        self.events = events
        self.ranks: list[_RankProcess] = []
        self.by_rank: dict[int, _RankProcess] = {}
        self.sel = selectors.DefaultSelector()
        self._round: DeathWindow | None = None  # while the ranks the last wait found ended are reaped
        self.state = ns.NodeState.for_plan(plan, node_rank, now=time.monotonic())
        self.state.launcher_answers = control is not None
        self.pages = StopPages()  # each rank's stop page, made at the start: should_stop() (agent/stop_pages.py)
        self._control, self._side = wire.ControlReader(), wire.ControlReader()
        self.output = OutputPump(
            plan, node_rank, self.sel, out=out, err=err, forked=events is not None, on_read=self._on_read
        )
        self.progress: ProgressWatch | None = None
        self.fs_clock_offset = 0.0  # of the error files' folder (node_io.fs_clock_offset)
        self._kept: set[int] = set()  # a zygote this agent keeps for the next attempt: spared by the sweep
        self.before_done: Callable[[], None] | None = None  # the last thing before the Done event
        self.silent_after = wire.silence_bound(plan) if control is not None else None  # heartbeats expected
        self._heard = time.monotonic()  # the last bytes on the control channel
        self._parent = os.getppid()  # its death sends SIGTERM (PR_SET_PDEATHSIG): once per thread it had

    # ---- spawning -------------------------------------------------------
    def start(self, error_dir: str, warm: Mapping[int, Zygote | None] | None = None) -> None:
        """Start the ranks; ``warm``: the zygotes a local launcher keeps for the job (preload/warm.py). The signals are
        caught from here on: one that comes before ``run`` waits in the pipe for the loop."""
        caught: tuple[int, ...] = (*wire.STOP_SIGNALS, *wire.FORWARDED_SIGNALS, wire.STACKS_SIGNAL)
        self.signals = CaughtSignals(caught + ((wire.TEARDOWN_SIGNAL,) if self.plan.launcher == "pdsh" else ()))
        self.sel.register(self.signals.fd, selectors.EVENT_READ, ("signal", None))
        prctl.set_child_subreaper()
        log_dir = self.plan.log_dir
        if log_dir:
            private_dir(log_dir)
        self.progress = progress = ProgressWatch(self.plan, self.node.node_rank, error_dir)
        self.fs_clock_offset = fs_clock_offset(log_dir or error_dir)
        self.pages = StopPages(error_dir, self.node.ranks)
        zygote = None
        if self.plan.preload:  # --preload: fork the ranks from one process that imported the modules (preload/)
            from dslaunch.agent.preload.client import for_node

            zygote = for_node(self.plan, self.node, os.environ, error_dir, warm)
        try:
            self._start_ranks(zygote, progress, log_dir, error_dir)
        finally:
            if zygote is not None and zygote.warm and zygote.proc_owner() == os.getpid():
                self._kept.add(zygote.proc.pid)  # this agent keeps it for the job (agent/job_agent.py)
            elif zygote is not None:
                zygote.close()

    def _start_ranks(self, zygote: Zygote | None, progress: ProgressWatch, log_dir: str | None, error_dir: str) -> None:
        for local_rank, rank in enumerate(self.node.ranks):
            error_file = fresh_error_file(log_dir or error_dir, rank)
            env = rankspec.rank_env(self.plan, self.node, local_rank, os.environ, error_file)
            env.update(self.pages.env_for(rank))
            progress.add(rank, env)
            argv = rankspec.rank_argv(self.plan, local_rank, self.node)
            try:
                proc = (zygote and zygote.spawn(argv, env, self.plan.cwd, rank)) or popen_rank(argv, env, self.plan.cwd)
            except OSError as exc:  # a --no-python target that is missing, a directory, not executable...
                self._cannot_start(rank, local_rank, argv[0], exc)
                return
            self._add_rank(rank, local_rank, proc, error_file, log_dir)
            progress.started(rank, proc.pid)
            self._apply(self.state.on_spawned(rank, local_rank, proc.pid))
            log_debug("rank started", rank=rank, local_rank=local_rank, pid=proc.pid, argv=argv)
            phases.record("spawned", env=env, rank=rank, local_rank=local_rank, pid=proc.pid)

    def _add_rank(self, rank: int, local_rank: int, proc: Any, error_file: str, log_dir: str | None) -> None:
        r = _RankProcess(
            rank=rank,
            local_rank=local_rank,
            proc=proc,
            pid=proc.pid,
            pidfd=pidfd_of(proc.pid),
            prefix=output_prefix(self.plan, self.node, local_rank).encode(),
            error_file=error_file,
        )
        if log_dir:
            r.stdout_log = private_open(os.path.join(log_dir, f"rank{rank}.stdout.log"), "ab")
            r.stderr_log = private_open(os.path.join(log_dir, f"rank{rank}.stderr.log"), "ab")
        self.ranks.append(r)
        self.by_rank[rank] = r
        assert proc.stdout is not None and proc.stderr is not None  # Popen(stdout=PIPE) always gives them
        self.output.add(rank, r.prefix, proc.stdout, proc.stderr, (r.stdout_log, r.stderr_log))
        if r.pidfd is not None:
            self.sel.register(r.pidfd, selectors.EVENT_READ, ("exit", r))

    def _cannot_start(self, rank: int, local_rank: int, program: str, exc: OSError) -> None:
        missing = isinstance(exc, FileNotFoundError)
        reason = exc.strerror or str(exc)
        self._apply(
            self.state.on_cannot_start(
                rank, local_rank, program, reason, missing=missing, now=time.monotonic(), wall=time.time()
            )
        )

    # ---- main loop ------------------------------------------------------
    def run(self) -> int:
        """After ``start``: the loop, then the sweep, with the signals still caught (``node_io.CaughtSignals``)."""
        if self.control is not None:
            os.set_blocking(self.control.fileno(), False)
            self.sel.register(self.control.fileno(), selectors.EVENT_READ, ("control", None))
        self.output.start()
        self._heard = time.monotonic()
        try:
            code = self._loop()
        finally:
            self._kill_leftovers()
            self.sel.unregister(self.signals.fd)
            self.signals.release()
            if self.progress is not None:
                self.progress.close()
            self.output.finish()
        if self.before_done is not None:
            self.before_done()  # the launcher may end this process's transport once it has the Done
        self.pages.close()
        self._emit(wire.encode(wire.Done(self.node.node_rank, code, self.state.stopped_by, self.state.requested_at)))
        self.output.wait_idle(STALL if self.state.stopping else None)
        return code

    def _loop(self) -> int:
        while True:
            now = time.monotonic()
            code = self._settle(now)
            if code is not None:
                return code
            alive_at = time.time()
            ready = self.sel.select(self._timeout(now))
            self._round = DeathWindow(alive_at, time.time())  # for a rank whose exit is in `ready`
            for key, _ in ready:
                self._dispatch(key)
            self._round = None
            self._check_silence(time.monotonic())
            self.output.tick(time.monotonic())
            for r in self.ranks:
                if r.pidfd is None and not r.reaped:
                    self._reap(r, block=False)
            if self.progress is not None and not self.state.stopping:
                for event in self.progress.tick(time.monotonic()):
                    self._emit(wire.encode(event))

    def _settle(self, now: float) -> int | None:
        """What the state asks for before the wait; the exit code once it says the node is done."""
        while True:
            actions = self.state.tick(now, self.output)
            code = self._apply(actions)
            if code is not None or not any(isinstance(action, ns.StopReading) for action in actions):
                return code  # else look again at once: the pipes were just closed

    def _timeout(self, now: float) -> float | None:
        """How long the next wait may be: the state's limit, a paused pipe's resumption, polls, the progress watch."""
        timeouts = [self.output.watch(now), self.state.wait_cap(now), self.output.next_due(now)]
        alive = self.state.alive
        if any(r.pidfd is None and not r.reaped for r in self.ranks):
            timeouts.append(_PID_POLL)
        if not alive:
            self.output.wake_when_written()  # waiting for pipes to close and output to drain
        if self.progress is not None and alive:
            timeouts.append(self.progress.due(now))
        if self.silent_after is not None:
            timeouts.append(max(0.0, self._heard + self.silent_after - now))
        known = [t for t in timeouts if t is not None]
        return min(known) if known else None

    def _dispatch(self, key: selectors.SelectorKey) -> None:
        kind, what = key.data
        if kind == "pipe":
            self.output.read_ready(what)
        elif kind == "exit" and not what.reaped:
            self._reap(what)
        elif kind == "control":
            self._read_control()
        elif kind == "signal":
            self._read_signals(key.fd)
        elif kind == "sink":
            self.output.woken()
        elif kind == "side":
            self._read_side(key.fd)

    def _apply(self, actions: Iterable[ns.Action]) -> int | None:
        """Carry out the state's actions, in order; the node's exit code once one says the node is done."""
        code = None
        for action in actions:
            match action:
                case ns.Emit(event=event):
                    self._emit(wire.encode(event))
                case ns.Exited(result=result):
                    self._exited(result)
                case ns.Signal() | ns.StopRequested():
                    self._signal(action)
                case ns.Stopping(signum=signum, grace=grace):
                    get_logger("agent").info("stopping ranks", signal=signal.Signals(signum).name, grace=grace)
                case ns.ProposeStep() | ns.SetStopStep():
                    self._stop_step(action)
                case ns.RequestStacks():
                    self._print_stacks()
                case ns.AbandonStalledReaders():
                    self._give_up_stalled_readers()
                case ns.StopReading():
                    self._kill_descendants()  # what holds the pipes open outlived its rank
                    self.output.stop_reading()
                case ns.Finish(code=finished):
                    code = finished
                case _:
                    assert_never(action)
        return code

    def _signal(self, action: ns.Signal | ns.StopRequested) -> None:
        """A teardown's signal to each rank's group; a stop's to its main process, not should_stop()'s (stop_pages)."""
        if isinstance(action, ns.Signal):
            for rank in action.ranks:
                killpg(self.by_rank[rank].pid, action.signum)
            return
        self.pages.request(action.deadline)
        taking_part = self.pages.participants()
        for rank in (r for r in action.ranks if r not in taking_part):
            signal_pid(self.by_rank[rank].pid, action.signum)

    def _exited(self, result: wire.RankExit) -> None:
        if result.failed:
            self.output.rank_failed()
        self._emit(wire.encode(result))
        record_exit(result)

    def _stop_step(self, action: ns.StopStepAction) -> None:
        if (proposal := carry_out(self.pages, action, self.node.node_rank)) is not None:
            self._emit(wire.encode(proposal))

    def _give_up_stalled_readers(self) -> None:
        for fd in self.output.abandon_stalled(STALL):
            get_logger("agent").info("output reader stalled while stopping: dropping rank output", fd=fd)

    def _on_read(self, rank: int, chunk: bytes, is_err: bool, now: float) -> None:
        """Output (or a pipe's end, ``chunk`` empty) was read from ``rank``'s pipe."""
        self.state.on_read(now)
        if chunk and is_err:
            r = self.by_rank[rank]
            r.tail = keep_tail(r.tail, chunk)
        if chunk and self.progress is not None:
            self.progress.output(rank, chunk, is_err)

    # ---- rank exits -----------------------------------------------------
    def _reap(self, r: _RankProcess, block: bool = True) -> None:
        returncode = r.proc.wait() if block else r.proc.poll()
        if returncode is None:
            return
        r.reaped = True
        if self.progress is not None:
            self.progress.ended(r.rank)
        if r.pidfd is not None:
            self.sel.unregister(r.pidfd)
            os.close(r.pidfd)
            r.pidfd = None
        record = ErrorRecord()
        tail: tuple[str, ...] = ()
        if returncode:  # its last stderr lines may still be in the pipe: they belong in the summary
            self.output.read_last_stderr(r.rank)
            record, tail = read_error_file(r.error_file, self.fs_clock_offset), tail_lines(r.tail)
        beats = self.progress.beats(r.rank) if self.progress is not None else 0
        now, wall = time.monotonic(), time.time()
        self._apply(
            self.state.on_rank_exit(
                r.rank, returncode, record, stderr_tail=tail, now=now, wall=wall, died=self._round, beats=beats
            )
        )

    # ---- control and signals ---------------------------------------------
    def _read_control(self) -> None:
        assert self.control is not None
        data = read_ready(self.control.fileno())  # b"": also a dial-back reset or silence
        if data:
            self._heard = time.monotonic()
            self.feed_control(data)
        elif data == b"":  # the launcher or its connection is gone
            self.sel.unregister(self.control.fileno())
            self.silent_after = None
            self.stop()

    def _check_silence(self, now: float) -> None:
        """No heartbeat from the launcher for ``silent_after`` seconds (a partition): as if it were gone."""
        if self.silent_after is None or now - self._heard <= self.silent_after or self.control is None:
            return
        text = f"dslaunch agent: nothing from the launcher for {self.silent_after:g} s: taking it as gone"
        print(text, file=sys.stderr, flush=True)
        self.sel.unregister(self.control.fileno())
        self.silent_after = None
        self.stop()

    def watch_side(self, fd: int) -> None:
        """A second control channel, for ``stop`` and the stop step (a one-attempt agent's dial-back)."""
        os.set_blocking(fd, False)
        self.sel.register(fd, selectors.EVENT_READ, ("side", None))
        self.state.launcher_answers = True  # on it (under mpirun: no stdin)

    def _read_side(self, fd: int) -> None:
        data = read_ready(fd)
        if data == b"":  # it never connected; a connection's end is the agent's SIGHUP (dialback_client.py)
            self.sel.unregister(fd)
            self._apply(self.state.launcher_unreachable())
        elif data:
            self.obey([c for c in self._side.feed(data) if c == wire.STOP or isinstance(c, _SIDE_COMMANDS)])

    def feed_control(self, data: bytes) -> None:
        """Whole lines of the control channel are obeyed; the first that is no command is logged at debug."""
        before = self._control.rejects.count
        self.obey(self._control.feed(data))
        if not before and self._control.rejects.count:
            get_logger("agent").debug("malformed control line", why=self._control.rejects.first)

    def obey(self, commands: list[wire.Command]) -> None:
        """Act on control commands (``NodeState.on_control``)."""
        for command in commands:
            self._apply(self.state.on_control(command, now=time.monotonic(), wall=time.time()))

    def stop(self) -> None:
        self._apply(self.state.on_control_closed(now=time.monotonic(), wall=time.time()))

    def _read_signals(self, fd: int) -> None:
        for signum in read_ready(fd, 512) or b"":
            lost = signum == signal.SIGTERM and os.getppid() != self._parent  # the parent's death, not a request
            self._apply(self.state.on_signal(signum, now=time.monotonic(), wall=time.time(), parent_lost=lost))

    def _print_stacks(self) -> None:
        """Every live rank prints its stack; the job goes on (agent/watch.py)."""
        if self.progress is not None:
            self.output.put_stacks(self.progress.request_stacks())

    # ---- the end ----------------------------------------------------------
    def _kill_leftovers(self) -> None:
        """Nothing the job started here outlives it: the ranks' sessions, every descendant (the agent is a
        subreaper, so double-forked daemons are among them), and, as a backstop, any process with this job's
        run id and node rank."""
        for r in self.ranks:
            killpg(r.pid, signal.SIGKILL)
            if not r.reaped:
                self._reap(r)
            for log in (r.stdout_log, r.stderr_log):
                if log is not None:
                    log.close()
        self._kill_descendants()
        procs.kill_job(self.plan.run_id, self.node.node_rank)

    def _kill_descendants(self) -> None:
        waiters = [w for r in self.ranks if (w := getattr(r.proc, "waiter", None))]  # warm ranks' (preload/warm.py)
        kill_descendants((os.getpid(), *waiters), spared={*(r.pid for r in self.ranks), *self._kept})

    def _emit(self, line: str) -> None:
        """An event: on its own pipe when there is one (the launcher always reads it), else before queued output."""
        if self.events is None:
            self.output.put_urgent(line.encode())
        else:
            write_all(self.events, line.encode())

    def console(self) -> SinkWriter:
        """A stand-in for ``sys.stderr``: the agent's own log lines queue with the ranks' stderr."""
        return self.output.console()
