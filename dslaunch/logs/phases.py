"""Launch timeline: when each rank reached each phase, as ``phase`` records in the ``--log-dir`` files.

The agent records ``spawned`` (at Popen) and ``exit`` (at reap, with the exit code) in ``agent<node>.jsonl``; the rank
records ``bootstrap``, ``torch_imported``, ``pg_ready``, ``mesh_ready`` and ``first_step`` in ``rank<N>.jsonl``, each
once per process. A record is ``{"event": "phase", "phase": ..., "t": <time.time()>, "rank": ..., "host": ...,
"attempt": <DSLAUNCH_RESTART_COUNT>, ...}`` with the usual reserved keys, written whatever the levels (a file-only
record, flushed at once so a rank killed later keeps it), and nothing at all without a log dir.
``dslaunch --report LOGDIR`` reads them back (dslaunch/report/). Stdlib only; no torch, no structlog.
"""

from __future__ import annotations

import os
import time

from dslaunch.logs import render
from dslaunch.logs._sinks import state

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from typing import Any

PHASES = ("spawned", "bootstrap", "torch_imported", "pg_ready", "mesh_ready", "first_step", "exit")
EVENT = "phase"

_done: set[str] = set()  # rank-side phases recorded by this process
_started: list[float] = []  # when the bootstrap began, before logging was set up
_attempts: dict[Any, int] = {}  # agent side: rank -> the attempt in the environment it was spawned with


def attempt(env: Any = None) -> int:
    """The restart attempt this process belongs to (``DSLAUNCH_RESTART_COUNT``, 0 when unset or not a number)."""
    text = (os.environ if env is None else env).get("DSLAUNCH_RESTART_COUNT", "").strip()
    return int(text) if text.isascii() and text.isdigit() else 0


def record(phase: str, *, module: str = "agent", t: float | None = None, env: Any = None, **fields: Any) -> None:
    """Write one phase record to this process's log file, if it has one (``fields`` may name the ``rank``).

    The agent passes a rank's ``env`` when it spawns it: the rank's attempt is then taken from that environment
    (and kept for the rank's later records), not from the agent's own.
    """
    st = state()
    if st.file is None:
        return
    now = time.time() if t is None else t
    rank = fields.get("rank")
    if env is not None:
        _attempts[rank] = attempt(env)
    ed: dict[str, Any] = {"ts": render._iso(now), "level": "info", "logger": module, "event": EVENT}
    ed.update(st.static)
    ed.update(phase=phase, t=round(now, 6), attempt=_attempts[rank] if rank in _attempts else attempt())
    ed.update(fields)
    import json  # only with a log file: a rank without one spares the import

    line = json.dumps(ed, default=str) + "\n"
    with st.lock:
        st.file.write(line)
        st.file.flush()


def mark(phase: str, t: float | None = None) -> None:
    """Rank side: record ``phase`` the first time it is reached in this process (later calls are one set lookup)."""
    if phase in _done:
        return
    _done.add(phase)
    if not state().configured:  # a rank without the bootstrap (torchrun, --no-python): logging from the env
        from dslaunch.logs._core import get_logger

        get_logger("bootstrap")
    record(phase, module="bootstrap", t=t)


def begin() -> None:
    """First thing in the rank bootstrap: remember the time (logging is not set up yet)."""
    _started.append(time.time())


def rank_started() -> None:
    """Once the rank's logging is set up: record ``bootstrap`` and watch for ``import torch`` to finish."""
    mark("bootstrap", _started[0] if _started else None)
    if state().file is not None:  # torch imported before us (a preloading parent): recorded now
        from dslaunch.logs import on_import  # after setup_rank's own hook: torch's loggers are routed first

        on_import.after_import("torch", _torch_imported)


def _torch_imported() -> None:
    mark("torch_imported")
