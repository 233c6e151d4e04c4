"""Run one node's ranks to their end: the node agent, however it was started (``python -m dslaunch.agent``, or
forked by a local launcher)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, TextIO, cast

from dslaunch.agent.node_loop import NodeLoop
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.agent.preload.client import Zygote
    from dslaunch.output.status_line import StatusLine


@dataclass(frozen=True)
class Forked:
    """What the launcher that forked this agent hands it: a pipe of their own for the events (the launcher always
    reads it: no reader of the output holds up an event), and the job's status line (--status-line), which this
    agent draws where it is its terminal's one writer (``output/pump.py``)."""

    events: int
    status_line: StatusLine | None = None


def read_line(fd: int) -> tuple[bytes, bytes]:
    """Read one line from a raw fd without buffering past what we return; (the line, what came after it)."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    line, _, rest = data.partition(b"\n")
    return line, rest


def run_node(
    plan: LaunchPlan,
    node_rank: int,
    control: BinaryIO | None,
    pending: bytes = b"",
    *,
    forked: Forked | None = None,
    warm: Mapping[int, Zygote | None] | None = None,
    before_done: Callable[[], None] | None = None,
    side_control: int | None = None,
) -> int:
    """Supervise this node's ranks until they end; return the node's exit code.

    Rank output goes to fds 1 and 2; events to ``forked``'s pipe where a local launcher forked this agent (with the
    job's status line, which it may draw), else on fd 1 as marked lines (a remote agent: one stream over the
    transport). ``warm``: the zygotes a local
    launcher keeps for the whole job, by node rank (preload/warm.py), handed to its forked agent. ``before_done``:
    called once the ranks are gone, just before the Done event (after it the launcher may end this process).
    ``side_control``: a pipe with a second control channel's bytes (``NodeLoop.watch_side``).
    """
    from dslaunch.logs import configure_agent

    configure_agent(plan.env, node_rank, plan.node(node_rank).host, plan.run_id)
    sys.stdout.flush()
    sys.stderr.flush()
    events, status_line = (None, None) if forked is None else (forked.events, forked.status_line)
    loop = NodeLoop(plan, node_rank, control=control, out=1, err=2, events=events, status_line=status_line)
    loop.before_done = before_done
    if side_control is not None:
        loop.watch_side(side_control)
    error_dir = tempfile.mkdtemp(prefix=f"dslaunch-{plan.run_id}-")
    console, sys.stderr = sys.stderr, cast(TextIO, loop.console())
    try:
        loop.start(error_dir, warm)
        loop.feed_control(pending)  # control lines that arrived with the plan
        return loop.run()
    finally:
        sys.stderr = console
        shutil.rmtree(error_dir, ignore_errors=True)
