"""How one rank ended, as the node agent reports it (pure): its exit event, whether it failed on its own and
when, or that it could not start (``agent/node_state.py`` decides with it)."""

from __future__ import annotations

from dataclasses import dataclass

from dslaunch import wire
from dslaunch.agent.failures import ErrorRecord

CLOCK_SLACK = 0.02  # a file's ctime comes from the kernel's coarse clock: up to a tick behind time.time()
WRITE_SLACK = 0.1  # a rank's failure time may precede the change of its error file by this much at most


@dataclass(frozen=True)
class RankId:
    rank: int
    local_rank: int
    node_rank: int
    host: str
    pid: int


def claimed_failure_time(record: ErrorRecord, signalled_at: float | None) -> float | None:
    """When the rank failed on its own, as its record claims it and as far as the kernel vouches for the claim; None:
    no claim that counts.

    The agent's own observation wins over what a rank writes: a claim counts only if the file was last changed
    (``written_at``, its ctime, which ``os.utime`` cannot set back) before our stop signal (``signalled_at``;
    None: not signalled), since what a rank writes once it is told to stop is no evidence of an earlier failure;
    and it is kept between ``WRITE_SLACK`` before that change and the change itself, so no rank dates its failure
    earlier than its file.
    """
    claimed, written = record.failed_at, record.written_at
    if claimed is None or written is None:
        return None
    if signalled_at is not None and written >= signalled_at - CLOCK_SLACK:
        return None
    return min(max(claimed, written - WRITE_SLACK), written + CLOCK_SLACK)


@dataclass(frozen=True)
class DeathWindow:
    """What the agent saw itself: the rank was alive at ``after`` (wall time) and had ended by ``before`` (the
    wait that reported its end returned then)."""

    after: float
    before: float


def rank_exit(
    who: RankId,
    returncode: int,
    record: ErrorRecord,
    *,
    signalled_at: float | None,
    wall: float,
    died: DeathWindow | None = None,
    stderr_tail: tuple[str, ...] = (),
    beats: int = 0,
) -> wire.RankExit:
    """The exit event of a rank that ended with ``returncode`` (a Popen one), ``wall`` being the time now.

    A rank whose error record shows it failed before our stop signal (``claimed_failure_time``) failed on its
    own, even if the signal ended it during its at-exit teardown: it is a root-cause candidate, at the time and
    with the code it failed with, not how it ended. So is a rank that had ended before we signalled it (``died``:
    its end was reported by a wait that returned before the signal); without a record that dates its failure,
    it failed at the earliest time the agent saw it could have (``died.after``): a rank that ends at once
    (``os._exit``, a crash) makes its peers fail a moment later, and they must not be named instead.
    """
    code, signame = wire.exit_code_of(returncode)
    if not code:
        record = ErrorRecord()
    if signalled_at is not None and died is not None and signalled_at >= died.before:
        signalled_at = None  # our signal came after its end
    failed_at = claimed_failure_time(record, signalled_at)
    signalled = signalled_at is not None
    if failed_at is None and not signalled and died is not None:
        failed_at = died.after
    if failed_at is not None and signalled and record.code:
        code, signame = record.code, None
    return wire.RankExit(
        rank=who.rank,
        local_rank=who.local_rank,
        node_rank=who.node_rank,
        host=who.host,
        pid=who.pid,
        code=code,
        signal=signame,
        ts=wall if failed_at is None else failed_at,
        by_agent=signalled and failed_at is None,
        error=record.error,
        stderr_tail=stderr_tail if code else (),
        beats=beats,
    )


def cannot_start(who: RankId, program: str, reason: str, *, missing: bool, wall: float) -> wire.RankExit:
    """A rank that cannot be started fails like one that exits 127 (not found) or 126 (cannot run), as a shell
    would: its error goes in the summary."""
    return wire.RankExit(
        rank=who.rank,
        local_rank=who.local_rank,
        node_rank=who.node_rank,
        host=who.host,
        pid=0,
        code=127 if missing else 126,
        signal=None,
        ts=wall,
        by_agent=False,
        error=f"cannot start rank {who.rank}: {program}: {reason}\n",
        stderr_tail=(),
    )
