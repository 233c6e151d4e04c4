"""Spawn one node's ranks and run them in a single selector loop: the I/O around ``agent/node_state.py``.

Every rank is its own session (a teardown's signal reaches its children too; a requested stop's, its main process
alone) and carries a parent-death signal, so nothing survives a SIGKILLed agent. The agent is a child subreaper:
what a rank double-forks (a ``setsid`` daemon) becomes the agent's child, and is killed when the ranks are done, as
is anything of the job's still left on this node (docs/teardown.md). The loop wakes on rank output, rank exit
(pidfd), the launcher's words, signals and the output sinks, tells :class:`NodeState` what happened and executes
what it answers; it decides nothing itself. Its parts: the rank processes (``agent/node_ranks.py``), what the
launcher says (``agent/node_control.py``), and the ranks' output (``output/pump.py``: the loop never blocks on a
reader, and stops reading a rank while its sink is full, docs/output.md).
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, BinaryIO

from dslaunch import wire
from dslaunch.agent.failures import ErrorRecord, keep_tail, read_error_file, tail_lines
from dslaunch.agent.node_control import LauncherChannels
from dslaunch.agent.node_io import (
    CaughtSignals,
    fresh_error_file,
    fs_clock_offset,
    killpg,
    log_debug,
    read_ready,
    record_exit,
    signal_pid,
    write_all,
)
from dslaunch.agent.node_ranks import NodeRanks, RankProcess
from dslaunch.agent.node_state import (
    AbandonStalledReaders,
    Action,
    Emit,
    Exited,
    Finish,
    NodeState,
    ProposeStep,
    RequestStacks,
    SetStopStep,
    Signal,
    Stopping,
    StopReading,
    StopRequested,
    StopStepAction,
)
from dslaunch.agent.rank_exits import DeathWindow
from dslaunch.agent.ranks import rank_argv, rank_env
from dslaunch.agent.stop_pages import StopPages, carry_out
from dslaunch.agent.watch import ProgressWatch
from dslaunch.errors import assert_never
from dslaunch.logs import get_logger, phases
from dslaunch.oslib import prctl
from dslaunch.oslib.owner_only import private_dir
from dslaunch.output.pump import OutputPump, SinkWriter
from dslaunch.output.sink import STALL
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.agent.preload.client import Zygote
    from dslaunch.output.status_line import StatusLine

_PID_POLL = 0.05  # a rank without a pidfd is polled this often


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
        status_line: StatusLine | None = None,
    ) -> None:
        """Rank output goes to the fds ``out`` and ``err`` (with ``status_line`` below it, where this agent draws
        it); events to ``events``, else before ``out``'s output."""
        self.plan = plan
        self.node = plan.node(node_rank)
        self.control = control
        self.events = events
        self.sel = selectors.DefaultSelector()
        self._round: DeathWindow | None = None  # while the ranks the last wait found ended are reaped
        self.state = NodeState.for_plan(plan, node_rank, now=time.monotonic())
        self.state.launcher_answers = control is not None
        self.pages = StopPages()  # each rank's stop page, made at the start: should_stop() (agent/stop_pages.py)
        self.channels = LauncherChannels(plan, control)
        self.output = OutputPump(plan, node_rank, self.sel, out=out, err=err, forked=events is not None,
                                 on_read=self._on_read, status_line=status_line)  # fmt: skip
        self.ranks = NodeRanks(plan, self.node, self.sel, self.output)
        self.progress: ProgressWatch | None = None
        self.fs_clock_offset = 0.0  # of the error files' folder (node_io.fs_clock_offset)
        self.before_done: Callable[[], None] | None = None  # the last thing before the Done event
        self._parent = os.getppid()  # its death sends SIGTERM (PR_SET_PDEATHSIG): once per thread it had

    # ---- spawning -------------------------------------------------------
    def start(self, error_dir: str, warm: Mapping[int, Zygote | None] | None = None) -> None:
        """Start the ranks; ``warm``: the zygotes a local launcher keeps for the job (preload/warm.py). The signals are
        caught from here on: one that comes before ``run`` waits in the pipe for the loop."""
        caught: tuple[int, ...] = (*wire.STOP_SIGNALS, *wire.FORWARDED_SIGNALS, wire.STACKS_SIGNAL)
        self.signals = CaughtSignals(
            caught + ((wire.TEARDOWN_SIGNAL,) if self.plan.transport.teardown_by_signal else ())
        )
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
            self._start_ranks(zygote, progress, log_dir or error_dir)
        finally:
            if zygote is not None and zygote.warm and zygote.owner == os.getpid():
                self.ranks.kept.add(zygote.proc.pid)  # this agent keeps it for the job (agent/job_agent.py)
            elif zygote is not None:
                zygote.close()

    def _start_ranks(self, zygote: Zygote | None, progress: ProgressWatch, error_dir: str) -> None:
        for local_rank, rank in enumerate(self.node.ranks):
            error_file = fresh_error_file(error_dir, rank)
            env = rank_env(self.plan, self.node, local_rank, os.environ, error_file)
            env.update(self.pages.env_for(rank))
            progress.add(rank, env)
            argv = rank_argv(self.plan, local_rank, self.node)
            try:
                pid = self.ranks.spawn(local_rank, argv, env, error_file, zygote).pid
            except OSError as exc:  # a --no-python target that is missing, a directory, not executable...
                self._cannot_start(rank, local_rank, argv[0], exc)
                return
            progress.started(rank, pid)
            self._apply(self.state.on_spawned(rank, local_rank, pid))
            log_debug("rank started", rank=rank, local_rank=local_rank, pid=pid, argv=argv)
            phases.record("spawned", env=env, rank=rank, local_rank=local_rank, pid=pid)

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
        self.channels.heard = time.monotonic()
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
            if self.channels.silent(time.monotonic()):  # as if the launcher were gone
                self._launcher_gone()
            self.output.tick(time.monotonic())
            for r in self.ranks.unwatched():
                self._reap(r, block=False)
            if self.progress is not None and not self.state.stopping:
                for event in self.progress.tick(time.monotonic()):
                    self._emit(wire.encode(event))

    def _settle(self, now: float) -> int | None:
        """What the state asks for before the wait; the exit code once it says the node is done."""
        while True:
            actions = self.state.tick(now, self.output)
            code = self._apply(actions)
            if code is not None or not any(isinstance(action, StopReading) for action in actions):
                return code  # else look again at once: the pipes were just closed

    def _timeout(self, now: float) -> float | None:
        """How long the next wait may be: the state's limit, a paused pipe's resumption, polls, the progress watch,
        the launcher's silence."""
        timeouts = [self.output.watch(now), self.state.wait_cap(now), self.output.next_due(now), self.channels.due(now)]
        alive = self.state.alive
        if self.ranks.unwatched():
            timeouts.append(_PID_POLL)
        if not alive:
            self.output.wake_when_written()  # waiting for pipes to close and output to drain
        if self.progress is not None and alive:
            timeouts.append(self.progress.due(now))
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

    def _apply(self, actions: Iterable[Action]) -> int | None:
        """Carry out the state's actions, in order; the node's exit code once one says the node is done."""
        code = None
        for action in actions:
            match action:
                case Emit(event=event):
                    self._emit(wire.encode(event))
                case Exited(result=result):
                    self._exited(result)
                case Signal() | StopRequested():
                    self._signal(action)
                case Stopping(signum=signum, grace=grace):
                    get_logger("agent").info("stopping ranks", signal=signal.Signals(signum).name, grace=grace)
                case ProposeStep() | SetStopStep():
                    self._stop_step(action)
                case RequestStacks():
                    self._print_stacks()
                case AbandonStalledReaders():
                    self._give_up_stalled_readers()
                case StopReading():
                    self.ranks.kill_descendants()  # what holds the pipes open outlived its rank
                    self.output.stop_reading()
                case Finish(code=finished):
                    code = finished
                case _:
                    assert_never(action)
        return code

    def _signal(self, action: Signal | StopRequested) -> None:
        """A teardown's signal to each rank's group; a stop's to its main process, not should_stop()'s (stop_pages)."""
        if isinstance(action, Signal):
            for rank in action.ranks:
                killpg(self.ranks[rank].pid, action.signum)
            return
        self.pages.request(action.deadline)
        taking_part = self.pages.participants()
        for rank in (r for r in action.ranks if r not in taking_part):
            signal_pid(self.ranks[rank].pid, action.signum)

    def _exited(self, result: wire.RankExit) -> None:
        if result.failed:
            self.output.rank_failed()
        self._emit(wire.encode(result))
        record_exit(result)

    def _stop_step(self, action: StopStepAction) -> None:
        if (proposal := carry_out(self.pages, action, self.node.node_rank)) is not None:
            self._emit(wire.encode(proposal))

    def _give_up_stalled_readers(self) -> None:
        for fd in self.output.abandon_stalled(STALL):
            get_logger("agent").info("output reader stalled while stopping: dropping rank output", fd=fd)

    def _on_read(self, rank: int, chunk: bytes, is_err: bool, now: float) -> None:
        """Output (or a pipe's end, ``chunk`` empty) was read from ``rank``'s pipe."""
        self.state.on_read(now)
        if chunk and is_err:
            r = self.ranks[rank]
            r.tail = keep_tail(r.tail, chunk)
        if chunk and self.progress is not None:
            self.progress.output(rank, chunk, is_err)

    # ---- rank exits -----------------------------------------------------
    def _reap(self, r: RankProcess, block: bool = True) -> None:
        returncode = self.ranks.exit_code(r, block=block)
        if returncode is None:
            return
        if self.progress is not None:
            self.progress.ended(r.rank)
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

    # ---- the launcher's words and signals ----------------------------------
    def _read_control(self) -> None:
        commands = self.channels.read()
        if commands is None:
            self._launcher_gone()
        else:
            self.obey(commands)

    def _launcher_gone(self) -> None:
        """The control channel ended, or went silent: the launcher or its connection is gone."""
        assert self.control is not None
        self.sel.unregister(self.control.fileno())
        self.stop()

    def watch_side(self, fd: int) -> None:
        """A second control channel, for ``stop`` and the stop step (a one-attempt agent's dial-back)."""
        os.set_blocking(fd, False)
        self.sel.register(fd, selectors.EVENT_READ, ("side", None))
        self.state.launcher_answers = True  # on it (under mpirun: no stdin)

    def _read_side(self, fd: int) -> None:
        commands = self.channels.read_side(fd)
        if commands is None:
            self.sel.unregister(fd)
            self._apply(self.state.launcher_unreachable())
        else:
            self.obey(commands)

    def feed_control(self, data: bytes) -> None:
        """Whole lines of the control channel are obeyed (``LauncherChannels.feed``)."""
        self.obey(self.channels.feed(data))

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
        """Nothing the job started here outlives it: the ranks' sessions (each reaped), then the sweep
        (``NodeRanks.sweep``)."""
        self.ranks.kill()
        for r in self.ranks:
            if not r.reaped:
                self._reap(r)
        self.ranks.sweep()

    def _emit(self, line: str) -> None:
        """An event: on its own pipe when there is one (the launcher always reads it), else before queued output."""
        if self.events is None:
            self.output.put_urgent(line.encode())
        else:
            write_all(self.events, line.encode())

    def console(self) -> SinkWriter:
        """A stand-in for ``sys.stderr``: the agent's own log lines queue with the ranks' stderr."""
        return self.output.console()
