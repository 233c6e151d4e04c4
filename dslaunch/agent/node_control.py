"""What the node agent hears from its launcher, its bytes turned into commands for ``NodeState``: the control
channel (stdin, or a job agent's pipe), a second one (a one-attempt agent's dial-back, under pdsh and mpirun), and
the control channel's silence (no heartbeat for ``wire.silence_bound``: a partition, which sends no EOF). The node
loop (``agent/node_loop.py``) registers the fds and obeys what comes.
"""

from __future__ import annotations

import sys
import time
from typing import BinaryIO

from dslaunch import wire
from dslaunch.agent.node_io import read_ready
from dslaunch.logs import get_logger
from dslaunch.plan import LaunchPlan

SIDE_COMMANDS = (wire.StopAt, wire.StopRequest)  # what a dial-back carries besides "stop" (NodeLoop.watch_side)


class LauncherChannels:
    def __init__(self, plan: LaunchPlan, control: BinaryIO | None) -> None:
        self.control = control
        self._control, self._side = wire.ControlReader(), wire.ControlReader()
        self.silent_after = wire.silence_bound(plan) if control is not None else None  # heartbeats expected
        self.heard = time.monotonic()  # the last bytes on the control channel

    def feed(self, data: bytes) -> list[wire.Command]:
        """Whole lines of the control channel as commands; the first that is no command is logged at debug."""
        before = self._control.rejects.count
        commands = self._control.feed(data)
        if not before and self._control.rejects.count:
            get_logger("agent").debug("malformed control line", why=self._control.rejects.first)
        return commands

    def read(self) -> list[wire.Command] | None:
        """What the control channel (ready to read) brought; None: the launcher or its connection is gone."""
        assert self.control is not None
        data = read_ready(self.control.fileno())  # b"": also a dial-back reset or silence
        if data == b"":
            self.silent_after = None
            return None
        if not data:
            return []
        self.heard = time.monotonic()
        return self.feed(data)

    def read_side(self, fd: int) -> list[wire.Command] | None:
        """What the second channel brought (``stop`` and the stop step only); None: it closed without a word, it
        never connected (a connection's end is the agent's SIGHUP: agent/dialback_client.py)."""
        data = read_ready(fd)
        if data == b"":
            return None
        return [c for c in self._side.feed(data) if c == wire.STOP or isinstance(c, SIDE_COMMANDS)] if data else []

    def silent(self, now: float) -> bool:
        """Whether the launcher has just been silent for ``silent_after`` seconds (a partition): taken as gone,
        once."""
        if self.silent_after is None or now - self.heard <= self.silent_after or self.control is None:
            return False
        text = f"dslaunch agent: nothing from the launcher for {self.silent_after:g} s: taking it as gone"
        print(text, file=sys.stderr, flush=True)
        self.silent_after = None
        return True

    def due(self, now: float) -> float | None:
        """Seconds until the launcher's silence would count (None: no heartbeats are expected)."""
        return None if self.silent_after is None else max(0.0, self.heard + self.silent_after - now)
