"""Events, agent -> launcher: one JSON object per line after ``MARKER``, each a frozen dataclass here.

They travel on a pipe of their own (forked local agents) or mixed into the agent's stdout (remote agents), which
``stream.split_events`` cuts into event lines and runs of output lines. Rank output always carries a prefix, so a
marked line comes from the agent. ``decoder.decode_checked`` reads them back, every field checked.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field

MARKER = "@dslaunch-event "


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


@dataclass(frozen=True)
class TimerWindow:
    """One rank's ``engine.timers`` regions summed over a window of steps: ``regions`` as (name, seconds in all,
    seconds in its fastest step); ``wall``: the window's wall time; ``first_step_at``: in a rank's first window,
    the Unix time of its first step."""

    node_rank: int
    rank: int
    index: int
    step: int
    steps: int
    wall: float
    regions: tuple[tuple[str, float, float], ...]
    first_step_at: float = 0.0


@dataclass(frozen=True)
class NodeWindows:
    """One node's ranks' windows of one number, in one event (the agent sends one a poll, not one a rank: issue 54).
    Columns, a place per rank: ``step`` its last step, ``steps``, ``wall``. Per region of ``regions``, ``who``: the
    places of the ranks that timed it, () for every rank; ``totals`` and ``fastest`` hold each region's seconds in
    all and in the fastest step, a value per rank that timed it, region after region (flat: one list to check).
    ``first_step_at``: the earliest of their first steps, in a first window."""

    node_rank: int
    index: int
    ranks: tuple[int, ...]
    step: tuple[int, ...]
    steps: tuple[int, ...]
    wall: tuple[float, ...]
    regions: tuple[str, ...]
    who: tuple[tuple[int, ...], ...]
    totals: tuple[float, ...]
    fastest: tuple[float, ...]
    first_step_at: float = 0.0

    def columns(self) -> Iterator[tuple[str, tuple[int, ...], tuple[float, ...], tuple[float, ...]]]:
        """Each region as (name, who, totals, fastest)."""
        at, n = 0, len(self.ranks)
        for name, who in zip(self.regions, self.who):
            end = at + (len(who) or n)
            yield name, who, self.totals[at:end], self.fastest[at:end]
            at = end


Event = Spawned | RankExit | Done | Idle | Stacks | NodeLost | StopAsked | StopStep | TimerWindow | NodeWindows
_KINDS: dict[str, type[Event]] = {
    "spawned": Spawned,
    "stop": StopAsked,
    "exit": RankExit,
    "done": Done,
    "idle": Idle,
    "stacks": Stacks,
    "lost": NodeLost,
    "window": TimerWindow,
    "windows": NodeWindows,
    "stopstep": StopStep,
}
_NAMES = {cls: name for name, cls in _KINDS.items()}


def encode(event: Event) -> str:
    fields = vars(event)  # the fields, each a value JSON takes (tuples as lists): no deep copy, as asdict() makes
    return MARKER + json.dumps({"ev": _NAMES[type(event)], **fields}, separators=(",", ":")) + "\n"


def exit_code_of(returncode: int) -> tuple[int, str | None]:
    """Map a Popen returncode (negative for signals) to (shell code, signal name)."""
    if returncode >= 0:
        return returncode, None
    try:
        return 128 - returncode, signal.Signals(-returncode).name
    except ValueError:
        return 128 - returncode, f"signal {-returncode}"
