"""The exit code of dslaunch's own srun step, from srun's code and its error lines (pure).

srun exits with the highest code of its tasks, a task killed by a signal counting as 128+N. With
``--kill-on-bad-exit``, a task that is still starting when another node's rank fails (its Python not yet
listening for the peer's signal) is killed by srun's own SIGTERM and counts 143, above the failing rank's
code. srun's report of a task killed after it began to terminate the step is the consequence, not the
cause: when srun's code is such a kill's, the job's code is the highest code a task exited with.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dslaunch.slurmlib.lost_nodes import TASK_LINE, TERMINATING_LINE

_EXITED = re.compile(r"^Exited with exit code (?P<code>[0-9]{1,3})$")


def step_code(srun_code: int, lines: Iterable[str]) -> int:
    """The job's exit code for a step that ended with ``srun_code`` and printed ``lines`` (srun's own)."""
    if srun_code <= 128:
        return srun_code
    exited: list[int] = []
    terminating = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if TERMINATING_LINE.match(line):
            terminating = True
        elif m := TASK_LINE.match(line):
            if code := _EXITED.match(m["what"].strip()):
                exited.append(int(code["code"]))
            elif not terminating:
                return srun_code  # a task killed before srun's own kills: its signal is the cause
    if srun_code in exited:
        return srun_code  # a task's own code (a rank's 139, a lost node agent's 254, a stop's 143)
    failed = [code for code in exited if code]
    return max(failed) if failed else srun_code
