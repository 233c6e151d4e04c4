"""Control messages, launcher -> agent: whole lines on the agent's stdin (``stop``, ``signal SIGUSR1``,
``signal SIGQUIT``: print every rank's stack), parsed exactly, never by substring. EOF means stop. And the signals
both sides of the wire mean, and a job agent's ``run`` and ``standby`` lines."""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dslaunch.wire.plan_codec import WireError, plan_from_b64, plan_to_b64
from dslaunch.wire_check import Rejects

if TYPE_CHECKING:
    from dslaunch.plan import LaunchPlan

STOP = "stop"
# What a signal to dslaunch or to a node agent means, on both sides of the wire:
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # tear down; the exit is 128+N
FORWARDED_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)  # passed on to every rank (control ``signal SIGUSR1``)
STACKS_SIGNAL = signal.SIGQUIT  # not forwarded as is: the agent asks each rank for its stack (docs/hangs.md)
# A one-attempt pdsh agent has no control channel: its launcher's fail-fast ``stop`` comes as this signal (ignored
# by default by every process), and a requested stop as SIGTERM.
TEARDOWN_SIGNAL = signal.SIGURG
_CONTROL_SIGNALS = {s.name: s for s in (*FORWARDED_SIGNALS, STACKS_SIGNAL)}  # what a control line may name


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
