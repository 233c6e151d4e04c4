"""Which nodes an srun step lost as nodes, read from srun's own error lines (pure; docs/elastic.md).

srun reports each task that ended badly (``srun: error: n1: task 0: Killed``) and each node that failed.
Only these blame a node for the next attempt: Slurm's node failure, a task launch that failed on the node,
dslaunch's task reporting its node agent lost (:data:`NODE_LOST_CODE`), and a task killed outright before
srun began to terminate the step (after that, srun's own kills are the consequence, not the cause). A rank's
failure ends its task with the rank's code and blames no node: it would fail anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

NODE_LOST_CODE = 254  # a task of dslaunch's step whose node agent was lost (killed, crashed, out of memory)

TASK_LINE = re.compile(r"^srun: error: (?P<host>[^\s:]+): tasks? [0-9,\-]+: (?P<what>.+)$")
_NODE_FAILED = re.compile(r"^srun: error: Node failure on (?P<host>[^\s,]+)")
_LAUNCH_FAILED = re.compile(r"^srun: error: Task launch for \S+ failed on node (?P<host>[^\s:]+): (?P<why>.*)$")
TERMINATING_LINE = re.compile(r"^srun: .*(Terminating|Force Terminated) (StepId|job step)")


def lost_nodes(lines: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(node, why) for each node the step lost as a node, in the order srun reported them."""
    found: dict[str, str] = {}
    terminating = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if TERMINATING_LINE.match(line):
            terminating = True
        elif m := _NODE_FAILED.match(line):
            found.setdefault(m["host"], "Slurm reported a node failure")
        elif m := _LAUNCH_FAILED.match(line):
            found.setdefault(m["host"], f"srun could not start its task there ({m['why'].strip()})")
        elif m := TASK_LINE.match(line):
            what = m["what"].strip()
            if what == f"Exited with exit code {NODE_LOST_CODE}":
                found.setdefault(m["host"], "its node agent was lost")
            elif what == "Killed" and not terminating:
                found.setdefault(m["host"], "its srun task was killed")
    return tuple(found.items())
