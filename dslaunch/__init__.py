"""dslaunch: a fast, fail-fast launcher for distributed PyTorch jobs.

Importing this package is cheap: torch is imported on the first
:func:`engine` call, never before.
"""

from __future__ import annotations

__version__ = "0.1.0"

TYPE_CHECKING = False  # typing itself is not imported at run time: every rank imports this package first
if TYPE_CHECKING:
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


def get_logger(module: str) -> Logger:
    """The dslaunch logger ``dslaunch.<module>``: "user", or "user.NAME" for your own code."""
    from dslaunch.logs._core import get_logger as _get_logger

    return _get_logger(module)


__all__ = ["__version__", "engine", "get_logger", "heartbeat"]
