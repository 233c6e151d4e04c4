"""What the user asked to see of a running job (``cli/observe_options.py`` parses it; pure)."""

from __future__ import annotations

from dataclasses import dataclass

from dslaunch.observe import record

DEFAULT_EVERY = 100  # steps between two breakdowns on the console (docs/observability.md: why)
DEFAULT_FACTOR = 1.5  # a straggler's time over the job's median (docs/observability.md: why)
DEFAULT_STEPS = 5  # steps it must stay that slow
DEFAULT_STATUS_EVERY = 30.0  # seconds between two posts to Kubeflow Trainer's progress API
STATUS_URL = "KUBEFLOW_TRAINER_STATUS_URL"  # set by Kubeflow Trainer's control plane (observe/trainer_status.py)


@dataclass(frozen=True)
class ObserveSettings:
    breakdown: bool = False  # --wall-clock-breakdown: print the job-wide breakdown
    every_steps: int | None = DEFAULT_EVERY  # --breakdown-every N
    every_seconds: float | None = None  # --breakdown-every Ns
    straggler_factor: float = DEFAULT_FACTOR  # 0: no straggler detection
    straggler_steps: int = DEFAULT_STEPS
    metrics_port: int | None = None
    metrics_addr: str = ""  # "": every address
    metrics_file: str | None = None
    log_dir: str | None = None
    trainer_status: bool = False  # KUBEFLOW_TRAINER_STATUS_URL is set: post progress there
    status_every: float = DEFAULT_STATUS_EVERY  # --trainer-status-every SECONDS
    total_steps: int | None = None  # --total-steps N: progress and time left
    status_line: bool = False  # --status-line: the terminal's last line (output/status_line.py)

    @property
    def window(self) -> int:
        """Steps per rank window: a straggler is named after one window of slow steps."""
        return max(1, self.straggler_steps)

    @property
    def collect(self) -> bool:
        """Whether ranks send windows at all."""
        return self.breakdown or self.straggler_factor > 0 or self.metrics or self.trainer_status or self.status_line

    @property
    def metrics(self) -> bool:
        return self.metrics_port is not None or self.metrics_file is not None

    def rank_env(self) -> dict[str, str]:
        return {record.ENV_STEPS: str(self.window)} if self.collect else {}
