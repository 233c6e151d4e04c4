"""Write a rank's failure as JSON where the node agent will look for it (``DSLAUNCH_ERROR_FILE``, which is also
``TORCHELASTIC_ERROR_FILE``).

Never a poorer record over a richer one: when torch's ``@record`` already wrote the exception there (a script
that catches it and then exits non-zero), its record stays and dslaunch's time and code are added beside it,
in keys torch does not read. Every text is bounded (``dslaunch/failure_bounds.py``), torch's included.
"""

from __future__ import annotations

import os
import time

from dslaunch.failure_bounds import MESSAGE_CHARS, bounded
from dslaunch.oslib.owner_only import private_open

# json, traceback and typing are imported only when a rank fails: every rank imports this module at start-up
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType
    from typing import Any

RANK_READ_BYTES = 64 << 20  # torch's record of a huge message is read (in the rank) up to this, to bound it


def user_traceback(exc: BaseException, skip_files: tuple[str, ...]) -> str:
    """The traceback text, without the bootstrap's and runpy's own frames."""
    import traceback

    tb: TracebackType | None = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename.endswith(skip_files)):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def error_record(exc: BaseException, text: str, ours: dict[str, Any], torch: dict[str, Any] | None) -> dict[str, Any]:
    """The record to write. ``ours``: ``ts`` and ``code``, when the rank failed and the code it failed with (even if a
    stop signal ends it later, during its exit), its rank and pid; ``torch``: the ``@record`` record already in the
    file, if any."""
    if torch is not None:
        return {"message": _bounded_torch(torch["message"]), **ours, **({"traceback": bounded(text)} if text else {})}
    return {
        "exception": type(exc).__qualname__,
        "message": bounded(str(exc), MESSAGE_CHARS),
        "traceback": bounded(text),
        **ours,
    }


def write_error_file(path: str, exc: BaseException, text: str, code: int) -> None:
    ours = {"ts": time.time(), "code": code, "rank": os.environ.get("RANK"), "pid": os.getpid()}
    record = error_record(exc, text, ours, _torch_record(path))
    tmp = f"{path}.{os.getpid()}.tmp"
    import json

    try:
        with private_open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass


def _torch_record(path: str) -> dict[str, Any] | None:
    """The record torch's ``@record`` left in ``path`` in this process (the agent removes older ones), if any."""
    try:
        with open(path, "rb") as f:
            raw = f.read(RANK_READ_BYTES + 1)
    except OSError:
        return None
    if len(raw) > RANK_READ_BYTES:
        return None
    import json

    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("message"), dict) else None


def _bounded_torch(message: dict[str, Any]) -> dict[str, Any]:
    """torch's ``message`` object with its texts bounded (its keys and their meaning kept)."""
    out = dict(message)
    if isinstance(out.get("message"), str):
        out["message"] = bounded(out["message"], MESSAGE_CHARS)
    info = out.get("extraInfo")
    if isinstance(info, dict):
        out["extraInfo"] = {key: bounded(value) if isinstance(value, str) else value for key, value in info.items()}
    return out
