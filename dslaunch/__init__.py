"""dslaunch: a fast, fail-fast launcher for distributed PyTorch jobs.

Importing this package is cheap: torch is imported on the first
:func:`engine` call, never before.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing itself is not imported at run time: every rank imports this package first
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from dslaunch.bootstrap.engine import Engine
    from dslaunch.logs._core import Logger


def engine(**kwargs: Any) -> Engine:
    """Return this process's engine (initialising torch.distributed on first use)."""
    from dslaunch.bootstrap.engine import engine as _engine

    return _engine(**kwargs)


def heartbeat() -> None:
    """Tell dslaunch this rank is making progress (for ``--hang-timeout``): one write, a no-op outside dslaunch."""
    from dslaunch.bootstrap.progress import beat

    beat()


def should_stop() -> bool:
    """True on every rank of the job at the same call once a stop was requested anywhere in the job (a signal to
    the launcher, a pod's stop): call it once per step at the same point on every rank, and save and exit on True.
    No collective, no system call while no stop is requested; always False outside dslaunch (docs/stopping.md)."""
    return (_should_stop or _load_stop_step()[0])()


def stop_deadline() -> float | None:
    """When the ranks' process groups get SIGTERM (``time.time()``) once a stop was requested; else None."""
    return (_stop_deadline or _load_stop_step()[1])()


# bootstrap/stop_step.py's functions once loaded: a call then imports nothing (0.1 µs, bench/bench_should_stop.py)
_should_stop: Callable[[], bool] | None = None
_stop_deadline: Callable[[], float | None] | None = None


def _load_stop_step() -> tuple[Callable[[], bool], Callable[[], float | None]]:
    global _should_stop, _stop_deadline
    from dslaunch.bootstrap import stop_step

    _should_stop, _stop_deadline = stop_step.should_stop, stop_step.stop_deadline
    return _should_stop, _stop_deadline


def get_logger(module: str) -> Logger:
    """The dslaunch logger ``dslaunch.<module>``: "user", or "user.NAME" for your own code."""
    from dslaunch.logs._core import get_logger as _get_logger

    return _get_logger(module)


__all__ = ["__version__", "engine", "get_logger", "heartbeat", "should_stop", "stop_deadline"]
