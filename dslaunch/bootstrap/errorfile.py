"""Write an uncaught exception as JSON where the node agent will look for it."""

from __future__ import annotations

import json
import os
import time
import traceback
from types import TracebackType

from dslaunch.private import private_open


def user_traceback(exc: BaseException, skip_files: tuple[str, ...]) -> str:
    """The traceback text, without the bootstrap's and runpy's own frames."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename.endswith(skip_files)):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def write_error_file(path: str, exc: BaseException, text: str, code: int) -> None:
    """``ts`` and ``code``: when the rank failed and the exit code it failed with, even if a stop signal
    ends it later, during its exit."""
    record = {
        "exception": type(exc).__qualname__,
        "message": str(exc),
        "traceback": text,
        "ts": time.time(),
        "code": code,
        "rank": os.environ.get("RANK"),
        "pid": os.getpid(),
    }
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with private_open(tmp, "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass
