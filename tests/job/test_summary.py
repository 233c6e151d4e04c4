"""The failure summary (pure): what it says for a rank failure, a lost node, a port another job holds."""

from __future__ import annotations

import pytest

from dslaunch.job.result import RankFailure
from dslaunch.job.state import Outcome
from dslaunch.job.summary import failures_of, format_summary, stepped
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


IMPORT = "ModuleNotFoundError: No module named 'nosuch'"
TRACEBACK = f'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    import nosuch\n{IMPORT}\n'


def _ended(rank: int, code: int, ts: float, *, by_agent: bool = False, beats: int = 0) -> RankExit:
    return RankExit(rank, rank, 0, "w1", 100 + rank, code, None, ts, by_agent, TRACEBACK if code else None, (), beats)


def test_failures_of_lists_own_failures_root_cause_first() -> None:
    root, later, stopped_one, fine = (
        _ended(2, 3, 1.0),
        _ended(0, 1, 2.0),
        _ended(1, 143, 1.5, by_agent=True),
        _ended(3, 0, 0.5),
    )
    outcome = Outcome(3, root_cause=root, exits=(later, stopped_one, fine, root))
    assert failures_of(outcome) == (RankFailure(2, "w1", 3, IMPORT), RankFailure(0, "w1", 1, IMPORT))
    assert failures_of(Outcome(0, exits=(fine,))) == ()


def test_stepped_is_any_ranks_beat() -> None:
    assert not stepped(Outcome(1, exits=(_ended(0, 1, 1.0), _ended(1, 143, 2.0, by_agent=True))))
    assert stepped(Outcome(1, exits=(_ended(0, 1, 1.0), _ended(1, 143, 2.0, by_agent=True, beats=4))))
