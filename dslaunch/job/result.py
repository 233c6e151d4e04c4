"""What one attempt of a job came to: the exit code, and for a failure, one line naming its cause."""

from __future__ import annotations

from dataclasses import dataclass

START_FAILED = 255  # a job that could not start, every runner (ssh itself exits 255 when it cannot connect)


@dataclass(frozen=True)
class RankFailure:
    """A rank that failed on its own in an attempt, as the restart decision compares them (job/restart_policy.py)."""

    rank: int
    host: str
    code: int
    exception: str | None  # its exception's type and message ("ImportError: ..."), from its traceback; None: none


@dataclass(frozen=True)
class JobResult:
    code: int
    cause: str = ""  # one line: what ended a failed attempt (for the restarts summary)
    retry: bool = True  # False when dslaunch itself was told to stop, or the job cannot start as planned
    # Hosts that failed as nodes (cannot connect, agent cannot start, agent or connection lost), with why:
    # left out of every later attempt (docs/elastic.md). A rank's own failure blames no host.
    blamed: tuple[tuple[str, str], ...] = ()
    # The job's attempt number, where the runner knows it better than the count of this launcher's own attempts
    # (one launcher per pod: the coordinator numbers them; a recreated pod joins in the middle).
    attempt: int | None = None
    # The ranks that failed on their own, the root cause first; empty where this launcher does not see every rank
    # of the job (Slurm's steps, a pod that is not the coordinator): the repeat and --no-restart-on rules then
    # stay out of it.
    failures: tuple[RankFailure, ...] = ()
    stepped: bool = False  # a rank of the attempt reached a step (a progress beat: docs/restarts.md)
    # Seconds from the attempt's start (this launcher began to supervise its ranks) to its first rank failing on its
    # own, by this launcher's clock; None: none did. --repeat-window reads it (job/restart_policy.py).
    failed_after: float | None = None
    # A requested stop by this signal ended the attempt (SIGTERM from Kubernetes or Slurm...): never restarted.
    stopped_by: int | None = None
    # The restarts counter's cause (observe.restart_cause), where the runner knows it better than the fields above:
    # the pods' coordinator, which leaves ``failures`` and ``blamed`` out of what it hands back.
    restart_cause: str = ""

    @property
    def failed(self) -> bool:
        return self.code != 0


def stopped(code: int, cause: str) -> JobResult:
    """An attempt that must not be restarted: a signal to dslaunch, or a plan that cannot work."""
    return JobResult(code, cause, retry=False)


def restart_cause(code: int, *, lost: bool, ranks: bool) -> str:
    """The ``cause`` label of an attempt that ended with ``code``: a node lost (a host blamed), a rank's own
    failure, a hang (--hang-timeout's 124), else "other"."""
    if lost:
        return "node_lost"
    if ranks:
        return "rank_failure"
    return "hang" if code == 124 else "other"
