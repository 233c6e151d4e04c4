"""The launcher's console collapse over remote agents' lines, for one attempt (``collapse_launcher.LineCollapse``).

Stdout collapses on its way into the nodes' lanes, stderr in the runner's ``lanes.ErrLane``; the lines of closed
windows go into a lane of their own. The job loop (``job/loop.py``) feeds it each output line, ticks it, and closes
it at the end.
"""

from __future__ import annotations

import time

from dslaunch.output import lanes
from dslaunch.output.collapse_launcher import LineCollapse
from dslaunch.output.sink import Sink
from dslaunch.plan import LaunchPlan


class RemoteConsole:
    """Made for an attempt whose plan collapses output (``plan.collapse_output``); ``close`` at its end.
    ``err``: the remote runner's stderr lane, whose lines collapse while the attempt runs (None: no remote stderr)."""

    def __init__(self, plan: LaunchPlan, out: Sink, err: lanes.ErrLane | None) -> None:
        self.out = LineCollapse(plan)
        self.err = LineCollapse(plan)
        self.lane = lanes.OutputLane(out, "collapsed")
        self.err_lane = err
        if err is not None:
            err.collapse = self.err

    def put(self, lane: lanes.OutputLane, text: str) -> None:
        if text := self.out.feed(text, time.monotonic()):
            lane.put(text)

    def flush_out(self, lane: lanes.OutputLane) -> None:
        """A rank of ``lane``'s node failed: what stdout's collapse holds goes into that lane, before its next
        lines (the ranks its agent stops)."""
        if text := self.out.flush():
            lane.put(text)

    def pause_for_stacks(self, now: float) -> None:
        self._write(self.out.pause_for_stacks(now), self.err.pause_for_stacks(now))

    def tick(self, now: float) -> None:
        self._write(self.out.due(now), self.err.due(now))

    def close(self) -> lanes.OutputLane:
        """Everything held, out; the lane to wait for."""
        self._write(self.out.flush(last=True), self.err.flush(last=True))
        self.detach()
        self.lane.close()
        return self.lane

    def detach(self) -> None:
        """Stderr lines pass uncollapsed from now on (the attempt is over, or its loop failed)."""
        if self.err_lane is not None:
            self.err_lane.collapse = None

    def _write(self, out: str, err: str) -> None:
        if out:
            self.lane.put(out)
        if err and self.err_lane is not None:
            self.err_lane.write(err.encode(), collapse=False)
