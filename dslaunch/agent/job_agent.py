"""A job agent (``python -m dslaunch.agent --for-job``: a node agent that lives for the job): the ssh and pdsh runners
start one per host once, and each attempt is a line on its control channel (``wire.job_run``): its stdin over ssh, the
connection it dialled back to the launcher under pdsh (``--dial-file``, agent/dialback_client.py). So a restart costs no
new session, no new agent and, with ``--preload``, no new import: the host's zygote is kept from attempt to attempt
(preload/warm.py).

Between attempts the agent waits on that channel: a ``run`` line starts the next attempt (as whatever node rank
the launcher gives this host), a ``standby`` line readies a spare host's zygote, and EOF (the job is over, or the
launcher or its connection is gone) ends the zygote and the agent. During an attempt it is the control channel,
as stdin is for any agent (``NodeLoop``); EOF there tears the node down and ends the agent too. After each
attempt the agent writes ``wire.ATTEMPT_END`` on its stderr and then its stdout, after the attempt's output: the
launcher's handle on the attempt ends there (runners/remote/job_agents.py).
"""

from __future__ import annotations

import os
import select
import sys
from typing import BinaryIO

from dslaunch import wire
from dslaunch.agent.node_io import write_attempt_end
from dslaunch.agent.run_node import run_node

KEEP = -1  # the key of this host's zygote in WarmZygotes: one for the job, whatever node rank an attempt gives it


class _Lines:
    """Whole lines from a raw fd, nothing read past what the caller has been given but ``pending``."""

    def __init__(self, fd: int, pending: bytes = b"") -> None:
        self.fd = fd
        self.pending = pending

    def next(self, silent_after: float | None = None) -> bytes | None:
        """The next line; None at EOF, or after ``silent_after`` seconds without a byte (a launcher cut off)."""
        os.set_blocking(self.fd, True)  # an attempt's loop left it non-blocking
        while b"\n" not in self.pending:
            if silent_after is not None and not select.select([self.fd], [], [], silent_after)[0]:
                print(f"dslaunch agent: nothing from the launcher for {silent_after:g} s: ending", file=sys.stderr)
                return None
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            except OSError:  # a dialled-back connection reset, or silent past its keepalive: as EOF
                return None
            if not chunk:
                return None
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line


def serve(control: BinaryIO, pending: bytes = b"", host: str | None = None) -> int:
    """Run the attempts the launcher sends on ``control`` until EOF; the last attempt's exit code. ``host``: this
    host's name in the plan (default: ``DSLAUNCH_HOST``), which its zygote and ranks carry."""
    from dslaunch.agent.preload.warm import WarmZygotes

    warm = WarmZygotes()
    lines = _Lines(control.fileno(), pending)
    host = host if host is not None else os.environ.get("DSLAUNCH_HOST")
    code = 0
    silent_after: float | None = None  # the last plan's (wire.silence_bound): none before the first
    try:
        while True:
            line = lines.next(silent_after)
            if line is None:
                return code
            try:
                parsed = wire.parse_job_line(line)
            except wire.WireError as exc:
                print(f"dslaunch agent: {exc}", file=sys.stderr, flush=True)
                return 2
            if parsed is None:
                continue  # a stop or a signal for an attempt that has ended
            node_rank, plan = parsed
            silent_after = wire.silence_bound(plan)
            warm.prepare(plan, 0 if node_rank is None else node_rank, key=KEEP, host=host)
            if node_rank is None:
                continue  # a spare: ready, and waiting for an attempt
            if not 0 <= node_rank < len(plan.nodes):
                print(f"dslaunch agent: node rank {node_rank} is not in 0..{len(plan.nodes) - 1}", file=sys.stderr)
                return 2
            kept = {node_rank: warm.zygotes[KEEP]} if KEEP in warm.zygotes else None
            code = run_node(plan, node_rank, control, lines.pending, warm=kept)
            lines.pending = b""
            _end_of_attempt()
    finally:
        warm.close_all()


def _end_of_attempt() -> None:
    write_attempt_end(2, 1)  # stdout last: the launcher reads stderr's marker once stdout's has come
