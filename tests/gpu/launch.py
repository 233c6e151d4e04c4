"""Run dslaunch (or a script alone) for the GPU tests and read back each rank's facts (scripts/facts.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.helpers import SCRIPTS

ROOT = Path(__file__).parents[2]
FACTS = str(SCRIPTS / "facts.py")
# Short timeouts everywhere: a broken NCCL or gloo set-up fails the test in a minute, not in torch's 10 or 30;
# NCCL says what went wrong, if anything does, in the output a failing test shows.
FAST = {"DSLAUNCH_PG_TIMEOUT": "60", "NCCL_DEBUG": "WARN"}
_RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_FACTS_LINE = re.compile(r"^(?:\[rank(\d+)\]: )?gpu-facts (\{.*\})$", re.M)


@dataclass(frozen=True)
class Cuda:
    """What torch sees with every GPU of the machine visible (CUDA_VISIBLE_DEVICES unset), by physical index."""

    torch: str
    cuda: str | None
    names: tuple[str, ...]
    uuids: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.names)


def without_device_mask() -> dict[str, str]:
    """This environment less CUDA_VISIBLE_DEVICES: the tests name physical GPUs (slots), as a hostfile does."""
    return {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}


def job_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment for a job: every GPU visible by its physical index, no rank or dslaunch settings."""
    env = {k: v for k, v in without_device_mask().items() if k not in _RANK_VARS and not k.startswith("DSLAUNCH_")}
    env.update(FAST)
    env.update(extra or {})
    return env


def launch(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, timeout: float = 100
) -> subprocess.CompletedProcess[str]:
    """``dslaunch ARGS`` to completion, from the repository root (within the test's own timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "dslaunch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=job_env(env),
        cwd=str(ROOT),
    )


def plan(args: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The plan ``dslaunch --dry-run --json ARGS FACTS`` prints."""
    result = launch(["--dry-run", "--json", *args, FACTS], env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    decoded: dict[str, Any] = json.loads(result.stdout)
    return decoded


def facts(stdout: str) -> dict[int, dict[str, Any]]:
    """Each rank's ``gpu-facts {json}`` line, by rank (a script run alone counts as rank 0)."""
    found: dict[int, dict[str, Any]] = {}
    for match in _FACTS_LINE.finditer(stdout):
        entry = json.loads(match[2])
        found[int(match[1]) if match[1] is not None else 0] = entry
    return found


def visible_count(slots: Sequence[str], physical: int) -> int:
    """How many devices CUDA shows for CUDA_VISIBLE_DEVICES=slots: the ids before the first one it has not."""
    count = 0
    for slot in slots:
        if not slot.isdigit() or int(slot) >= physical:
            break
        count += 1
    return count
