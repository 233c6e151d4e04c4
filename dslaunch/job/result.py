"""What one attempt of a job came to: the exit code, and for a failure, one line naming its cause."""

from __future__ import annotations

from dataclasses import dataclass

START_FAILED = 255  # a job that could not start, every runner (ssh itself exits 255 when it cannot connect)


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

    @property
    def failed(self) -> bool:
        return self.code != 0


def stopped(code: int, cause: str) -> JobResult:
    """An attempt that must not be restarted: a signal to dslaunch, or a plan that cannot work."""
    return JobResult(code, cause, retry=False)
