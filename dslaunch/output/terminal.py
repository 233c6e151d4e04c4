"""The launcher as its terminal's one writer while a remote job runs with a status line (``--status-line``).

Over ssh, pdsh or mpirun every byte the launcher's terminal gets passes through the launcher: the ranks' stdout (the
attempt's sink, ``job/loop.py``), the nodes' stderr (``lanes.ErrLane``) and the launcher's own lines (its log
records and prints, through ``sys.stderr``, and the lines it says with :func:`say`). Where stdout and stderr are
one terminal, they all go into the attempt's sink while the attempt runs, and that sink keeps the status line below
what it writes (``output/sink.py``), so no line is ever glued to it. Where a child writes the terminal itself
(srun) or several local agents do (several nodes on one machine), there is no line.

``job/loop.supervise`` takes the terminal (:func:`own`) with the job's :class:`StatusLine` and the remote runner's
stderr lane, both passed down to it, and gives it back before the attempt's summary. ``sys.stderr`` is the one
thing of the process it swaps, for as long as it owns the terminal: the launcher's log records and prints reach
the terminal through it.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

from dslaunch.output.lanes import ErrLane, OutputLane
from dslaunch.output.pump import SinkWriter, same_file
from dslaunch.output.sink import STALL, Sink, write_within
from dslaunch.output.status_line import StatusLine


class _Text(SinkWriter):
    """``sys.stderr`` while the sink owns the terminal: each write queues in order with the ranks' output."""

    def fileno(self) -> int:
        return 2  # ``own`` checked it is the terminal ``out`` writes

    def isatty(self) -> bool:
        return True


class Owner:
    """``out`` as the terminal's one writer, until :meth:`release`."""

    def __init__(self, out: Sink, err: ErrLane, line: StatusLine) -> None:
        self.out = out
        self.err = err
        self.line = line
        err.flush(STALL)  # what went to stderr before comes first
        with err.lock:
            self._err_lane, err.lane = err.lane, OutputLane(out, "stderr")
        self._stderr: TextIO = sys.stderr
        sys.stderr.flush()
        sys.stderr = _Text(out)
        line.queue = self._queue
        out.live = True
        out.status_line = line

    def _queue(self, data: bytes) -> bool:
        """A line of the launcher's own, in order with everything else (False: the sink's reader was given up on)."""
        if self.out.dead:
            return False
        self.out.put(None, [data])
        return True

    def release(self, stall: float) -> None:
        """The line erased (waited for up to ``stall`` s), and every writer back on its own stream."""
        self.out.end_status_line(stall)
        self.line.queue = None
        sys.stderr = self._stderr
        self.err.flush(stall)
        with self.err.lock:
            lane, self.err.lane = self.err.lane, self._err_lane
        if lane is not None:
            lane.close()


def own(out: Sink, err: ErrLane | None, line: StatusLine | None) -> Owner | None:
    """Make ``out`` (our stdout's sink) the terminal's one writer, drawing ``line``, where one is asked for, a
    remote runner's ``err`` carries every node's stderr, and stdout and stderr are one terminal; None where not."""
    if line is None or err is None or out.fd != 1 or not os.isatty(1) or not same_file(1, 2):
        return None
    return Owner(out, err, line)


def say(line: StatusLine | None, data: bytes) -> bool:
    """A line of the launcher's own to stderr (given up on after ``STALL`` seconds): while the launcher's sink draws
    ``line``, queued there in order with everything else; else written, over the line an agent may have drawn."""
    if line is None:
        return write_within(2, data, STALL)
    if line.queue is not None and line.queue(data):
        return True
    return write_within(2, line.over_it() + data, STALL)
