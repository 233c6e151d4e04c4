"""One logging system for the launcher, the node agents and every rank: ``dslaunch.<module>``.

Imports only the standard library here; structlog is loaded with the first
enabled JSON record. Nothing is configured at import time. See docs/logging.md.

    log = dslaunch.get_logger("user")       # or get_logger("user.trainer")
    log.info("step done", step=3, loss=0.1)
"""

from __future__ import annotations

from dslaunch.logs.spec import (
    CRITICAL,
    DEBUG,
    ERROR,
    INFO,
    MODULES,
    OFF,
    WARNING,
    LogSpec,
    RankFilter,
    SpecError,
    help_text,
    parse_ranks,
    parse_spec,
)

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from typing import Any

_LAZY = {
    "Logger": "_core",
    "get_logger": "_core",
    "configure": "_core",
    "configure_from_env": "_core",
    "configure_agent": "_core",
    "file_record": "_core",
    "set_levels": "_core",
    "level_of": "_sinks",
    "shutdown": "_core",
    "comm_record": "channels",
    "comm_enabled": "channels",
    "flush_comm_summary": "channels",
    "timers_report": "channels",
    "timers_enabled": "channels",
    "setup_rank": "_core",
    "route_torch": "routing",
    "route_warnings": "routing",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dslaunch.logs' has no attribute {name!r}")
    import importlib

    if module == "routing":
        import logging  # noqa: F401 - before routing, whose own import would run a rank's logging hook half-made

    return getattr(importlib.import_module(f"dslaunch.logs.{module}"), name)


__all__ = [  # noqa: PLE0604 - plus the lazily imported names
    "DEBUG",
    "INFO",
    "WARNING",
    "ERROR",
    "CRITICAL",
    "OFF",
    "MODULES",
    "LogSpec",
    "RankFilter",
    "SpecError",
    "parse_spec",
    "parse_ranks",
    "help_text",
    *_LAZY,
]
