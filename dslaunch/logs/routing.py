"""Route foreign stdlib loggers (torch's, Python warnings, ``py:NAME``) into dslaunch's sinks.

Handlers go on named loggers only: the root logger and the user's ``basicConfig``
stay the user's. torch gives its registered loggers ``propagate=False`` and its own
stderr handlers at ``import torch``, so routing is (re)applied right after that import. A rank imports this
module (and so ``logging``) only once something imports ``logging`` (``on_import``, wired by ``_core.setup_rank``).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from dslaunch.logs import _sinks
from dslaunch.logs import spec as S

_routed: set[str] = set()  # stdlib logger names carrying our handler


class StdlibHandler(logging.Handler):
    """A stdlib handler feeding records into dslaunch's console and file sinks."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            name = record.name
            module = (
                "torch"
                if name == "torch" or name.startswith("torch.")
                else ("py:warnings" if name == "py.warnings" else f"py:{name}")
            )
            level = min(max(record.levelno // 10 * 10, S.DEBUG), S.CRITICAL)
            ed: dict[str, Any] = {
                "ts": record.created,
                "level": level,
                "logger": module,
                "event": record.getMessage().rstrip("\n"),
            }
            ed.update(_sinks.state().static)
            if module == "torch":
                ed["qname"] = name
            if record.exc_info:
                ed["exc_info"] = record.exc_info
            _sinks.write(level, ed)
        except Exception:  # noqa: BLE001 - a logging failure must not kill the rank
            self.handleError(record)


_HANDLER = StdlibHandler()


def _attach(name: str) -> logging.Logger:
    lg = logging.getLogger(name)
    if _HANDLER not in lg.handlers:
        lg.addHandler(_HANDLER)
    lg.propagate = False  # ours now: no second copy through the user's root handlers
    _routed.add(name)
    return lg


def _stdlib_level(level: int) -> int:
    return logging.CRITICAL + 1 if level >= S.OFF else level


def apply_levels() -> None:
    """Give every ``py:NAME`` in the spec (and already-routed loggers) its spec level."""
    st = _sinks.state()
    for module, _level in st.spec.modules:
        if module.startswith("py:"):
            qname = "py.warnings" if module == "py:warnings" else module[3:]
            _attach(qname)
    for qname in _routed:
        module = (
            "torch" if qname.split(".")[0] == "torch" else "py:warnings" if qname == "py.warnings" else f"py:{qname}"
        )
        if module == "torch" and qname != "torch":
            continue  # torch's children inherit from "torch"
        logging.getLogger(qname).setLevel(_stdlib_level(_sinks.level_of(module)))


def route_warnings() -> None:
    """``warnings.warn`` -> the ``py:warnings`` module (WARNING level)."""
    logging.captureWarnings(True)
    _attach("py.warnings")
    apply_levels()


def route_torch() -> None:
    """Swap torch's own stderr handlers for ours; torch's level follows the ``torch`` module.

    Left alone when TORCH_LOGS is set: then torch's own configuration is what the user asked for.
    """
    if os.environ.get("TORCH_LOGS") or "torch" not in sys.modules:
        return
    try:
        from torch._logging import _internal

        qnames = set(_internal.log_registry.get_log_qnames()) | {"torch"}
        is_torch: Any = _internal._is_torch_handler
    except (ImportError, AttributeError):  # private API moved: route the top logger only
        qnames, is_torch = {"torch"}, (lambda h: False)
    for qname in qnames:
        lg = _attach(qname)
        for h in list(lg.handlers):
            if h is not _HANDLER and is_torch(h):
                lg.removeHandler(h)
    apply_levels()
