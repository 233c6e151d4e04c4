"""megatron-core's initialize_model_parallel and the compat getters in one 4-rank gloo job: every group's
rank list, size and rank equal on every rank, for tp=2 with ep in {1, 2} and etp in {1, tp}, plus cp and pp."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.helpers import SCRIPTS, run_cli

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api, pytest.mark.frameworks]
SCRIPT = SCRIPTS / "megatron_groups.py"
SPECS = [
    "tp=2,ep=2",  # etp = tp (Megatron's default): ep groups [0, 2], [1, 3]
    "tp=2,ep=2,etp=1",
    "tp=2",
    "tp=2,etp=1",
    "tp=2,cp=2,ep=2,etp=1",
    "tp=2,cp=2",
    "pp=2,tp=2,ep=2,etp=1",
    "pp=4",  # embedding [first, last] apart from the pp group; middle stages in neither embedding group
]


def test_groups_equal_megatron_core_on_every_rank() -> None:
    # Found, not imported: importing megatron.core (and torch) here would slow every collection of the suite.
    if importlib.util.find_spec("megatron.core") is None:
        pytest.skip("megatron-core is a test extra (pip install -e '.[test]')")
    result = run_cli(
        ["--nproc-per-node", "4", "--master-port", "0", str(SCRIPT), *SPECS],
        timeout=170,
        env={"DSLAUNCH_PG_TIMEOUT": "60"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    found = re.findall(r"rank (\d): OK (\d+) groups", result.stdout)
    assert sorted(int(r) for r, _ in found) == [0, 1, 2, 3], result.stdout[-3000:]
    assert all(int(n) == 14 * len(SPECS) for _, n in found), found
