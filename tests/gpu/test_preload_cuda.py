"""--preload torch against a real CUDA (docs/preload.md): ranks forked from a zygote that imported torch initialise
CUDA themselves and work; a zygote in which CUDA was initialised refuses to fork, and the ranks are exec'd."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.gpu.launch import FACTS, SCRIPTS, Cuda, facts, launch, visible_count

pytestmark = [pytest.mark.gpu, pytest.mark.torch, pytest.mark.launch]
# A module on PYTHONPATH, as a user's own package would be; the job's PYTHONPATH is kept after it.
PATH_ENV = {"PYTHONPATH": os.pathsep.join(p for p in (str(SCRIPTS / "preload"), os.environ.get("PYTHONPATH")) if p)}
# server.fork_blocker()'s reasons that a CUDA initialisation can trip, in the order it checks them
REFUSED = re.compile(
    r"^dslaunch: warning: --preload torch,cuda_at_import on localhost: this node's ranks exec'd instead: "
    r"(the preloaded process runs \d+ threads|torch\.cuda is initialised in the preloaded process"
    r"|the preloaded process holds /dev/nvidia\S* open)",
    re.M,
)


def _two_ranks(tmp_path: Path, preload: str) -> list[str]:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("localhost slots=2\n")  # two ranks: OMP_NUM_THREADS=1, so numpy starts no thread pool
    return ["-H", str(hostfile), "--master-port", "0", "--preload", preload, FACTS]


def _correct(stdout: str, forked: bool, cuda: Cuda) -> None:
    found = facts(stdout)
    assert sorted(found) == [0, 1], stdout
    visible = visible_count(["0", "1"], cuda.count)
    for rank, entry in found.items():
        assert entry["forked"] is forked, entry
        assert entry["early_sum"] == 4.0 and entry["gpu_sum"] == 499500.0, entry  # CUDA works in the rank
        assert entry["device"] == f"cuda:{rank % visible}" and entry["cpu_sum"] == [3.0, 3.0], entry


@pytest.mark.timeout(120)
def test_forked_ranks_initialise_cuda_themselves(tmp_path: Path, cuda: Cuda) -> None:
    """`import torch` initialises no CUDA, so the ranks are forked, and each initialises CUDA after the fork."""
    result = launch(_two_ranks(tmp_path, "torch"), env={"MODE": "gloo", "INIT_CUDA_FIRST": "1"})
    assert result.returncode == 0, result.stderr
    assert "warning: --preload" not in result.stderr, result.stderr
    _correct(result.stdout, forked=True, cuda=cuda)


@pytest.mark.timeout(120)
def test_a_zygote_with_cuda_initialised_refuses_to_fork(tmp_path: Path, cuda: Cuda) -> None:
    result = launch(
        _two_ranks(tmp_path, "torch,cuda_at_import"), env={**PATH_ENV, "MODE": "gloo", "INIT_CUDA_FIRST": "1"}
    )
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning: --preload" in line]
    assert len(warnings) == 1 and REFUSED.match(warnings[0]), result.stderr
    print(f"the zygote's reason: {warnings[0]}")
    _correct(result.stdout, forked=False, cuda=cuda)
