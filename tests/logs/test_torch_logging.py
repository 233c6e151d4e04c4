"""One real torch launch (2 gloo ranks): collectives logged per rank, torch's loggers and warnings routed."""

from __future__ import annotations

import pytest

from tests.helpers import SCRIPTS, run_cli

SCRIPT = str(SCRIPTS / "log_torch_ranks.py")


@pytest.mark.launch
@pytest.mark.torch_api
@pytest.mark.torch
def test_comm_debug_and_torch_output_go_through_the_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_LOGS", raising=False)  # set, torch keeps its own handlers (and "" crashes torch)
    proc = run_cli(
        [
            "--nproc-per-node",
            "2",
            "--master-port",
            "0",
            "--log-level",
            "comm=debug,torch=info",
            "--log-ranks",
            "all",
            SCRIPT,
        ],
        timeout=120,
        env={"DSLAUNCH_PG_TIMEOUT": "30", "DSLAUNCH_LOG_LEVEL": ""},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("torch-done 2.0") == 2
    err = proc.stderr.splitlines()
    for rank in (0, 1):
        mine = [line for line in err if line.startswith(f"[rank{rank}]: ")]
        assert any(" D " in line and " comm: " in line and "all_reduce" in line for line in mine), mine
        own = [line for line in mine if "torch-own-logger" in line]
        assert len(own) == 2 and all(" torch: " in line and "qname=torch.distributed" in line for line in own), own
        warned = [line for line in mine if "py:warnings:" in line and "UserWarning" in line]
        assert warned and "copy construct" in warned[0], mine
