"""The process-wide logging state and the two sinks: console (stderr) and the per-process JSON-lines file.

The bottom of dslaunch.logs (with ``spec`` and ``render``): ``_core`` (loggers, set-up) and ``routing`` (stdlib and
torch loggers) both write here.
"""

from __future__ import annotations

import _thread  # threading.Lock is _thread.allocate_lock: a rank's start-up spares importing threading
import os
import sys

from dslaunch.logs import render
from dslaunch.logs import spec as S
from dslaunch.oslib.owner_only import private_open

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from typing import IO, Any


class _LoggingState:
    """Process-global logging state (filled once by configure)."""

    def __init__(self) -> None:
        self.configured = False
        self.spec = S.LogSpec()
        self.channels_on: frozenset[str] = frozenset()
        self.json_console = False
        self.color = False
        self.console_all_levels = True  # False: this rank is outside --log-ranks
        self.static: dict[str, Any] = {}
        self.file: IO[str] | None = None
        self.lock = _thread.allocate_lock()
        self.who = ""


_STATE = _LoggingState()


def state() -> _LoggingState:
    return _STATE


def level_of(module: str) -> int:
    """The effective level of a module under the current configuration."""
    return _STATE.spec.level_for(module, _STATE.channels_on)


def write(level: int, ed: dict[str, Any]) -> None:
    """Send one record (reserved keys first) to the console and the file sinks."""
    st = _STATE
    exc = ed.pop("exc_info", None)
    to_console = level >= S.WARNING or st.console_all_levels
    if not to_console and st.file is None:
        return
    if exc:
        ed = render.attach_exception(ed, exc)
    json_line = render.json_line(ed) if (st.file is not None or st.json_console) else ""
    with st.lock:
        if to_console:
            stream = sys.stderr
            stream.write(json_line if st.json_console else render.console_line(ed, st.color, st.who, st.static))
            stream.flush()
        if st.file is not None:
            st.file.write(json_line)
            if level >= S.WARNING:
                st.file.flush()


def _flush_file() -> None:
    if _STATE.file is not None:
        try:
            _STATE.file.flush()
        except (OSError, ValueError):
            pass


def _after_fork() -> None:
    """A forked child (DataLoader worker) keeps logging, with its own pid and its own line-buffered file."""
    st = _STATE
    st.lock = _thread.allocate_lock()
    st.static["pid"] = os.getpid()
    if st.file is not None:
        st.file = private_open(st.file.name, "a", encoding="utf-8", buffering=1)
