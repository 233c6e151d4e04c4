"""The failure summary (pure): what it says for a rank failure, a lost node, a port another job holds."""

from __future__ import annotations

import pytest

from dslaunch.job.state import Outcome
from dslaunch.job.summary import format_summary
from dslaunch.plan import LaunchPlan, NodePlan, Program
from dslaunch.wire import RankExit

PLAN = LaunchPlan("ssh", "r1", (NodePlan("w1", 0, ("0",), (0,)),), "w1", 29500, Program("train.py"))


def _exit(**kw: object) -> RankExit:
    base = dict(rank=0, local_rank=0, node_rank=0, host="w1", pid=7, code=1, signal=None, ts=1.0, by_agent=False)
    return RankExit(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: The server socket has failed to listen on any local network address. port: 29500, "
        "useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use",
        "OSError: [Errno 98] Address already in use",
    ],
)
def test_a_taken_rendezvous_port_gets_a_launcher_sentence(text: str) -> None:
    cause = _exit(error=f"Traceback (most recent call last):\n  ...\n{text}\n")
    summary = format_summary(Outcome(code=1, root_cause=cause, exits=[cause]), PLAN)
    assert summary is not None
    assert "the rendezvous port 29500 on w1 is taken (another job?)" in summary
    assert "traceback:" in summary


def test_other_failures_get_no_port_hint() -> None:
    cause = _exit(error="Traceback (most recent call last):\nValueError: boom\n")
    summary = format_summary(Outcome(code=1, root_cause=cause, exits=[cause]), PLAN)
    assert summary is not None and "hint" not in summary


def test_a_lost_node_killed_by_a_signal_is_said_so() -> None:
    summary = format_summary(Outcome(code=137, lost_node=(0, "w1", -9)), PLAN)
    assert summary is not None and "node 0 (w1) disappeared: its agent was killed by SIGKILL" in summary
