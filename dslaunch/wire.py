"""Everything that crosses the launcher ↔ node-agent boundary, in one place (stdlib only).

- **The plan**: JSON, base64 for transports that need one line or one variable. It carries
  exported environment values (tokens, keys), so it never travels on a command line, which
  any user can read in ``/proc/PID/cmdline``. The launcher sends it on the agent's stdin
  (local, ssh), in the agent's environment (srun, mpirun/mpiexec: ``PLAN_VAR``), or in a
  0600 file that the agent deletes once read (pdsh, which cannot carry stdin).
- **Events**, agent → launcher: one JSON object per line after ``MARKER``, on a pipe of their
  own (forked local agents) or mixed into the agent's stdout (remote agents), which
  ``split_events`` cuts into event lines and runs of output lines. Rank output always carries a
  prefix, so a marked line comes from the agent.
- **Control messages**, launcher → agent: whole lines on the agent's stdin
  (``stop``, ``signal SIGUSR1``, ``signal SIGQUIT``: print every rank's stack), parsed exactly, never by
  substring. EOF means stop.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import signal
from collections.abc import Iterable, Iterator, MutableMapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from dslaunch.limits import MAX_WORLD_SIZE
from dslaunch.wire_check import (
    INT_MAX,
    TIMER_WINDOW_FIELDS,
    Bool,
    Int,
    ListOf,
    Malformed,
    Maybe,
    Real,
    Rejects,
    Row,
    Spec,
    Text,
    fields,
    load_object,
)
from dslaunch.wire_check import TimerWindow as TimerWindow  # noqa: PLC0414 - an Event kind, exported from here

if TYPE_CHECKING:
    from dslaunch.plan import LaunchPlan

PLAN_VAR = "DSLAUNCH_PLAN_B64"
MARKER = "@dslaunch-event "
STOP = "stop"
# What a signal to dslaunch or to a node agent means, on both sides of the wire:
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # tear down; the exit is 128+N
FORWARDED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)  # passed on to every rank (control ``signal SIGUSR1``)
STACKS_SIGNAL = signal.SIGQUIT  # not forwarded as is: the agent asks each rank for its stack (docs/hangs.md)
# A one-attempt pdsh agent has no control channel: its launcher's fail-fast ``stop`` comes as this signal (ignored
# by default by every process), and a requested stop as SIGTERM.
TEARDOWN_SIGNAL = signal.SIGURG
_CONTROL_SIGNALS = {s.name: s for s in (*FORWARDED_SIGNALS, STACKS_SIGNAL)}  # what a control line may name


class WireError(ValueError):
    """A plan or message that does not decode."""


# ---- the plan ------------------------------------------------------------------------------------


def plan_to_b64(plan: LaunchPlan) -> str:
    return base64.urlsafe_b64encode(plan.to_json().encode()).decode()


def plan_from_b64(text: str) -> LaunchPlan:
    from dslaunch.plan import LaunchPlan

    try:
        return LaunchPlan.from_json(base64.urlsafe_b64decode(text.encode()).decode())
    except (binascii.Error, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise WireError(f"the launch plan does not decode: {type(exc).__name__}: {str(exc)[:200]}") from None


def plan_from_env(env: MutableMapping[str, str]) -> LaunchPlan | None:
    """The plan in ``PLAN_VAR``, removed from ``env`` so no rank inherits it; None when absent."""
    text = env.pop(PLAN_VAR, None)
    return None if text is None else plan_from_b64(text)


def plan_from_file(path: str) -> LaunchPlan:
    """Read the plan from a 0600 file and delete it at once: it holds the job's secrets."""
    return staged_from_file(path)[0]


def staged_from_file(path: str) -> tuple[LaunchPlan, str | None]:
    """The plan from a staged 0600 file (deleted at once: it holds the job's secrets), and the ``dialback_text`` line
    after it, if any (pdsh: the way back to the launcher, agent/dialback_client.py)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError as exc:
        raise WireError(f"cannot read the launch plan {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WireError(f"the launch plan {path} is not ASCII") from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    plan_line, _, dial = text.partition("\n")
    return plan_from_b64(plan_line.strip()), dial.strip() or None


# ---- events: agent -> launcher --------------------------------------------------------------------


@dataclass(frozen=True)
class Spawned:
    rank: int
    local_rank: int
    pid: int
    host: str


@dataclass(frozen=True)
class RankExit:
    """How one rank ended."""

    rank: int
    local_rank: int
    node_rank: int
    host: str
    pid: int
    code: int  # shell-style: 128+N for a death by signal N
    signal: str | None
    ts: float
    by_agent: bool  # it ended after the agent had signalled it (teardown)
    error: str | None = None  # traceback text from the rank's error file
    stderr_tail: tuple[str, ...] = field(default=())
    beats: int = 0  # its progress beats (engine ready, engine.timers.step(), dslaunch.heartbeat()); 0: no step

    @property
    def failed(self) -> bool:
        return self.code != 0


@dataclass(frozen=True)
class Done:
    """The node agent is finishing with this exit code; ``stopped_by``: a requested stop's signal, at this time."""

    node_rank: int
    code: int
    stopped_by: int | None = None
    stop_requested_at: float | None = None


@dataclass(frozen=True)
class StopAsked:
    """A stop was requested of this node by ``signum`` at ``ts`` (its wall clock): the launcher requests it of every
    node (one pod's SIGTERM stops every pod)."""

    node_rank: int
    signum: int
    ts: float


@dataclass(frozen=True)
class Idle:
    """With --hang-timeout: whether no rank of this node has made progress for that long (sent on each change);
    ``live``: its ranks still running (0: all ended, the node is finishing)."""

    node_rank: int
    idle: bool
    live: int = 1


@dataclass(frozen=True)
class Stacks:
    """After a stacks request: each rank as (rank, state, progress count, seconds since its last progress); state:
    "collective" (its stack is in torch.distributed), "running", "not started", "no-python", "exited"."""

    node_rank: int
    host: str
    ranks: tuple[tuple[int, str, int, float], ...]
    traces: tuple[str, ...] = ()  # the NCCL flight recorder dumps its NCCL ranks were asked for (--hang-timeout)


@dataclass(frozen=True)
class NodeLost:
    """Launcher → launcher, one job across pods (``dslaunch/pods/``): a pod left the job before its end, its
    launcher stopped by a signal (``status`` -N) or gone (its connection dropped or went silent: None)."""

    node_rank: int
    host: str
    status: int | None = None
    why: str = ""  # for the summary: "its launcher received SIGTERM", "nothing heard from it for 4 s", ...


@dataclass(frozen=True)
class StopStep:
    """After a requested stop, this node's proposed ``should_stop()`` step: its ranks' largest count + 1 (None: no
    rank calls it); the launcher answers every agent with the largest proposal (``StopAt``)."""

    node_rank: int
    step: int | None


Event = Spawned | RankExit | Done | Idle | Stacks | NodeLost | StopAsked | StopStep | TimerWindow
_KINDS: dict[str, type[Event]] = {
    "spawned": Spawned,
    "stop": StopAsked,
    "exit": RankExit,
    "done": Done,
    "idle": Idle,
    "stacks": Stacks,
    "lost": NodeLost,
    "window": TimerWindow,
    "stopstep": StopStep,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def encode(event: Event) -> str:
    return MARKER + json.dumps({"ev": _NAMES[type(event)], **asdict(event)}, separators=(",", ":")) + "\n"


def decode(line: str) -> Event | None:
    """The event on a marked line; None for ordinary output or anything malformed (``decode_checked`` says why)."""
    event = decode_checked(line)
    return event if not isinstance(event, Malformed) else None


def decode_checked(line: str) -> Event | Malformed | None:
    """The event on a marked line, every field's type and range checked (``wire_check``); ``Malformed`` (why) for a
    marked line that is no event; None for ordinary output."""
    if not line.startswith(MARKER):
        return None
    try:
        raw = load_object(line[len(MARKER) :])
        kind = raw.pop("ev", None)
        cls = _KINDS.get(kind) if type(kind) is str else None
        if cls is None:
            return Malformed(f"no event kind {str(kind)[:40]!r}")
        required, optional = _SCHEMAS[cls]
        return cls(**fields(raw, required, optional))
    except Malformed as exc:
        return exc


# What each event's fields may hold. A node agent cuts what it sends (a rank's error at TRACEBACK_CHARS, its stderr
# tail); these bounds are wider, so no event an agent makes is refused.
_RANK = Int(0, MAX_WORLD_SIZE)
_NODE = Int(0, MAX_WORLD_SIZE)
_HOST = Text(1024)
_CODE = Int(0, 255)
_TIME = Real(-1e12, 1e12)
_SCHEMAS: dict[type, tuple[dict[str, Spec], dict[str, Spec]]] = {
    Spawned: ({"rank": _RANK, "local_rank": _RANK, "pid": Int(0, INT_MAX), "host": _HOST}, {}),
    RankExit: (
        {
            **{"rank": _RANK, "local_rank": _RANK, "node_rank": _NODE, "host": _HOST, "pid": Int(0, INT_MAX)},
            **{"code": _CODE, "signal": Maybe(Text(64)), "ts": _TIME, "by_agent": Bool()},
        },
        {"error": Maybe(Text(1 << 20)), "stderr_tail": ListOf(Text(1 << 16), 4096), "beats": Int(0, INT_MAX)},
    ),
    Done: ({"node_rank": _NODE, "code": _CODE}, {"stopped_by": Maybe(Int(1, 64)), "stop_requested_at": Maybe(_TIME)}),
    StopAsked: ({"node_rank": _NODE, "signum": Int(1, 64), "ts": _TIME}, {}),
    Idle: ({"node_rank": _NODE, "idle": Bool()}, {"live": Int(0, MAX_WORLD_SIZE)}),
    Stacks: (
        {"node_rank": _NODE, "host": _HOST, "ranks": ListOf(Row((_RANK, Text(64), Int(0, INT_MAX), _TIME)), 1 << 16)},
        {"traces": ListOf(Text(4096), 1 << 16)},
    ),
    NodeLost: ({"node_rank": _NODE, "host": _HOST}, {"status": Maybe(Int(-127, 255)), "why": Text(4096)}),
    TimerWindow: TIMER_WINDOW_FIELDS,
    StopStep: ({"node_rank": _NODE, "step": Maybe(Int(1, 1 << 62))}, {}),
}


_MARK = MARKER.encode()
# Agent -> launcher, a line of its own on a remote agent's stderr, never shown: a rank failed, so the lines the
# launcher's console collapse holds print now, before the lines that follow it on that stream (the failing node's
# ranks saying they were stopped). Its stdout needs none: the failed rank's exit event is on that stream.
FLUSH_LINE = "@dslaunch-flush"
_LINE_MARK = b"\n" + _MARK
_HELD_MAX = 1 << 20  # an unfinished line longer than this (not from an agent: they cut at 64 KiB) goes as is


def split_events(chunks: Iterable[bytes]) -> Iterator[str]:
    """A mixed stream as it arrives, in whole lines: each event line alone, output lines in runs.

    Linear in the bytes: output is never split line by line, only cut where a marked line starts.
    """
    held = b""
    for chunk in chunks:
        data = held + chunk if held else chunk
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) < _HELD_MAX:
            held = data
            continue
        end = end or len(data)
        held = data[end:]
        yield from _runs(data[:end])
    if held:
        yield from _runs(held)


def _runs(block: bytes) -> Iterator[str]:
    pos = 0
    while pos < len(block):
        if block.startswith(_MARK, pos):
            stop = block.find(b"\n", pos) + 1 or len(block)
        else:
            found = block.find(_LINE_MARK, pos)
            stop = len(block) if found < 0 else found + 1
        yield block[pos:stop].decode("utf-8", "replace")
        pos = stop


def exit_code_of(returncode: int) -> tuple[int, str | None]:
    """Map a Popen returncode (negative for signals) to (shell code, signal name)."""
    if returncode >= 0:
        return returncode, None
    try:
        return 128 - returncode, signal.Signals(-returncode).name
    except ValueError:
        return 128 - returncode, f"signal {-returncode}"


# ---- control: launcher -> agent -------------------------------------------------------------------


def control_stop() -> bytes:
    """Tear the node down now (a rank failed somewhere): every rank's process group gets SIGTERM."""
    return f"{STOP}\n".encode()


@dataclass(frozen=True)
class StopRequest:
    """A requested stop (dslaunch was signalled ``signum``): each rank's main process is signalled, its process
    group only after --stop-grace; ``now``: end that grace at once (a second signal to dslaunch)."""

    signum: int
    now: bool = False


def control_request_stop(signum: int, now: bool = False) -> bytes:
    return f"{STOP} {signal.Signals(signum).name}{' now' if now else ''}\n".encode()


_STOP_LINE = re.compile(
    rf"{STOP} (SIG(?:INT|TERM|HUP|USR1|USR2))( now)?"
)  # a requested stop: its signal, the grace's end


@dataclass(frozen=True)
class StopAt:
    step: int  # the job's stop step: the launcher's answer to the agents' StopStep (docs/stopping.md)


def control_stop_at(step: int) -> bytes:
    return f"stop-at {int(step)}\n".encode()


# The ssh runner's heartbeat on each agent's control channel (runners/ssh/runner.py::Keepalive): an agent that hears
# nothing there for ``silence_bound`` seconds takes its launcher as lost (a partition sends no EOF) and tears down.
HEARTBEAT = "hb"


def control_heartbeat() -> bytes:
    return f"{HEARTBEAT}\n".encode()


def silence_bound(plan: LaunchPlan) -> float | None:
    """How long an agent of ``plan`` may hear nothing on its control channel: about --ssh-connect-timeout, as the
    launcher's own bound on a silent host, under the ssh runner, which sends heartbeats; None elsewhere."""
    return plan.remote.connect_timeout + 2 if plan.transport.heartbeats else None


def control_signal(signum: int) -> bytes:
    name = signal.Signals(signum).name
    if name not in _CONTROL_SIGNALS:
        raise WireError(f"only {', '.join(_CONTROL_SIGNALS)} are forwarded to ranks, not {name}")
    return f"signal {name}\n".encode()


MAX_CONTROL_LINE = 1024  # control lines are words; a longer one is malformed, and memory stays bounded
Command = str | int | StopRequest | StopAt  # what a control line asks (ControlReader.feed)


def parse_stop_at(line: str) -> int | None:
    """The step of a ``stop-at N`` line (N: 1 to 18 digits, not 0); None for any other line."""
    found = re.fullmatch(r"stop-at ([0-9]{1,18})", line)
    return (int(found[1]) or None) if found else None


@dataclass
class ControlReader:
    """Splits the control stream into whole lines; ``feed`` returns the commands they carry."""

    _partial: bytes = b""
    rejects: Rejects = field(default_factory=Rejects)  # lines that are no command (the caller logs the first)

    def feed(self, data: bytes) -> list[Command]:
        """``"stop"``, a :class:`StopRequest`, a :class:`StopAt` or a signal number per complete line; a heartbeat is
        nothing; any other line is malformed: counted in ``rejects`` and ignored (the launcher's channel is trusted:
        a bad line ends nothing)."""
        self._partial += data
        *lines, self._partial = self._partial.split(b"\n")
        if len(self._partial) > MAX_CONTROL_LINE:
            self._partial = b""
            lines.append(b"\xff" * (MAX_CONTROL_LINE + 1))  # counted below, as a line too long
        commands: list[Command] = []
        for raw in lines:
            line = raw.strip().decode("ascii", "replace")
            if line == STOP:
                commands.append(STOP)
            elif (asked := _STOP_LINE.fullmatch(line)) is not None:
                commands.append(StopRequest(int(signal.Signals[asked[1]]), asked[2] is not None))
            elif (step := parse_stop_at(line)) is not None:
                commands.append(StopAt(step))
            elif line.startswith("signal ") and line[7:] in _CONTROL_SIGNALS:
                commands.append(int(_CONTROL_SIGNALS[line[7:]]))
            elif line not in (HEARTBEAT, ""):
                self.rejects.note(f"control line {line[:40]!r}{'...' if len(line) > 40 else ''} is no command")
        return commands


# ---- a job agent (``--for-job``, agent/job_agent.py). Launcher -> agent, lines on its stdin: ``run N PLAN`` starts
# an attempt as node rank N of PLAN (base64); ``standby PLAN``: a spare gets ready (with --preload, its zygote imports
# now) and waits; EOF ends the job. Agent -> launcher: after each attempt, once its output is out, ``ATTEMPT_END`` on
# its stderr, then its stdout; a one-attempt pdsh agent (``--plan-file``) also ends its stderr with it.
ATTEMPT_END = "@dslaunch-attempt-end"


def job_run(node_rank: int, plan: LaunchPlan) -> bytes:
    return f"run {node_rank} {plan_to_b64(plan)}\n".encode()


def job_standby(plan: LaunchPlan) -> bytes:
    return f"standby {plan_to_b64(plan)}\n".encode()


def parse_job_line(line: bytes) -> tuple[int | None, LaunchPlan] | None:
    """A ``run`` line's (node rank, plan), a ``standby``'s (None, plan), else None; ``WireError``: a bad plan."""
    words = line.decode("ascii", "replace").split()
    if len(words) == 3 and words[0] == "run" and words[1].isascii() and words[1].isdigit():
        return int(words[1]), plan_from_b64(words[2])
    if len(words) == 2 and words[0] == "standby":
        return None, plan_from_b64(words[1])
    return None
