"""Which nodes a finished srun step lost as nodes, from srun's own lines (pure), and the probe's output split."""

from __future__ import annotations

import pytest

from dslaunch.slurmlib.lost_nodes import NODE_LOST_CODE, lost_nodes
from dslaunch.slurmlib.srun import probe_argv, probe_outputs

LOST = f"Exited with exit code {NODE_LOST_CODE}"
TERM = "srun: launch/slurm: _step_signal: Terminating StepId=5.0"

CASES = [
    ([], ()),
    (["srun: error: n2: task 1: Exited with exit code 5", TERM], ()),  # a rank's failure blames no node
    (
        [f"srun: error: n1: task 0: {LOST}", TERM, "srun: error: n2: task 1: Exited with exit code 1"],
        (("n1", "its node agent was lost"),),
    ),
    (
        ["srun: error: n1: task 0: Killed", TERM, "srun: error: n2: task 1: Killed"],
        (("n1", "its srun task was killed"),),
    ),  # n2 was killed by srun's own teardown
    ([TERM, "srun: error: n2: tasks 2-3: Killed"], ()),
    (
        ["srun: error: Node failure on n3", "srun: error: n3: task 2: Killed"],
        (("n3", "Slurm reported a node failure"),),
    ),
    (
        ["srun: error: Task launch for StepId=9.0 failed on node n2: Invalid node name specified"],
        (("n2", "srun could not start its task there (Invalid node name specified)"),),
    ),
    (["[n1:rank0]: srun: error: Node failure on n2"], ()),  # a rank's own output, prefixed: not srun's
    ([f"srun: error: n1: task 0: {LOST}\r\n"], (("n1", "its node agent was lost"),)),
    (["srun: error: n1: task 0: Exited with exit code 137"], ()),  # a rank killed by SIGKILL (OOM): its own failure
]


@pytest.mark.parametrize(("lines", "expected"), CASES)
def test_lost_nodes(lines: list[str], expected: tuple[tuple[str, str], ...]) -> None:
    assert lost_nodes(lines) == expected


def test_probe_output_is_split_by_the_node_each_task_names() -> None:
    argv = probe_argv(["n3", "n1"], "python3 -c 'print(1)'", "r1")
    assert argv[:7] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--nodelist=n3,n1", "--kill-on-bad-exit=0",
                        "--label", "--job-name=dslaunch-probe-r1"]  # fmt: skip
    stdout = "1: dslaunch-probe-node n3\n0: dslaunch-probe-node n1\n0: A\n1: B\n1: C: d\nnoise\n"
    assert probe_outputs(stdout) == {"n1": "A", "n3": "B\nC: d"}
