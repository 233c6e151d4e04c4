"""The exit code of dslaunch's own srun step, from srun's code and its own lines (pure)."""

from __future__ import annotations

import pytest

from dslaunch.slurmlib.step_code import step_code

TERM = "srun: launch/slurm: _step_signal: Terminating StepId=6.0"
FAILED_5 = "srun: error: n2: task 1: Exited with exit code 5"
N1, N2 = "srun: error: n1", "srun: error: n2"
LATE = "srun: error: n3: task 3: Terminated"

CASES = [
    (0, [], 0),
    (5, [FAILED_5, TERM, "srun: error: n1: task 0: Exited with exit code 1"], 5),
    # the CI failure: node 0's task was still starting when node 1's rank failed, and srun's SIGTERM killed it
    (143, [FAILED_5, TERM, "srun: error: n1: task 0: Terminated", "srun: Force Terminated StepId=6.0"], 5),
    (137, [FAILED_5, TERM, "srun: error: n1: task 0: Killed"], 5),
    (143, [FAILED_5, TERM, "srun: error: n1: task 0: Exited with exit code 143"], 143),  # a task's own 143
    # the peer that heard of the failure exits 1 before the failing node's task (its node agent lost: 254)
    (
        254,
        [
            "srun: error: n2: task 1: Exited with exit code 1",
            TERM,
            "srun: error: n1: task 0: Exited with exit code 254",
        ],
        254,
    ),
    (143, ["srun: error: n1: task 0: Exited with exit code 143", TERM], 143),  # a task's own 143 (a stop)
    (139, ["srun: error: n1: task 0: Exited with exit code 139", TERM, "srun: error: n2: task 1: Killed"], 139),
    (137, ["srun: error: n1: task 0: Killed", TERM, "srun: error: n2: task 1: Exited with exit code 1"], 137),
    (143, [TERM, "srun: error: n1: task 0: Terminated"], 143),  # no task failed before srun's kills
    (143, ["srun: error: n1: task 0: Terminated", FAILED_5], 143),  # killed by someone else, not by srun
    (143, [f"{N1}: tasks 0-1: Exited with exit code 3", f"{N2}: task 2: Exited with exit code 7\r\n", TERM, LATE], 7),
    (143, ["[n1:rank0]: srun: error: n1: task 0: Exited with exit code 5", TERM], 143),  # a rank's own output
    (143, ["srun: error: n1: task 0: Exited with exit code 0", TERM, "srun: error: n2: task 1: Terminated"], 143),
]


@pytest.mark.parametrize(("srun_code", "lines", "expected"), CASES)
def test_step_code(srun_code: int, lines: list[str], expected: int) -> None:
    assert step_code(srun_code, lines) == expected
