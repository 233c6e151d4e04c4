"""Code written for torchtitan's mesh names runs unchanged on dslaunch's: ``engine.mesh["dp"]``, ``["tp"]`` and
``["dp", "tp"]`` after ``--mesh dp=2,tp=2`` (root dims dp_shard, tp), and ``["dp"]`` of a 1-D ``dp=4`` mesh and of an
HSDP one, each equal to the same step on torch's own ``init_device_mesh(..., ("dp", "tp"))`` (real gloo ranks)."""

from __future__ import annotations

import re

import pytest

from tests.helpers import SCRIPTS, run_cli

pytestmark = [pytest.mark.torch, pytest.mark.launch, pytest.mark.torch_api]


def test_a_torchtitan_style_script_runs_unchanged_on_the_engines_mesh() -> None:
    result = run_cli(
        ["--nproc-per-node", "4", "--master-port", "0", "--mesh", "dp=2,tp=2", str(SCRIPTS / "torchtitan_style.py")],
        timeout=120,
        env={"DSLAUNCH_PG_TIMEOUT": "30"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(re.findall(r"rank (\d): torchtitan-style OK", result.stdout)) == ["0", "1", "2", "3"], result.stdout
