"""What a failed rank left behind: its error file (the bootstrap's, or torch's ``@record``) and its stderr's tail."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace

from dslaunch.failure_bounds import READ_BYTES, bounded
from dslaunch.limits import ascii_int

STDERR_TAIL = 20  # lines of a failed rank's stderr in the summary
TAIL_BYTES = 16 << 10  # raw stderr kept per rank for those lines
_STAMP_DIGITS = 20  # torch's timestamp: whole seconds as text


@dataclass(frozen=True)
class ErrorRecord:
    """The failure's text and, as the rank tells it, when it failed and with which exit code; ``written_at``: when
    the kernel says the file was last changed (its ctime, on this node's clock), which the rank cannot set back."""

    error: str | None = None
    failed_at: float | None = None  # time.time() of the failure, as the rank claims it
    code: int | None = None
    written_at: float | None = None


def read_error_file(path: str, clock_offset: float = 0.0) -> ErrorRecord:
    """The record in ``path``, read up to ``READ_BYTES`` (a larger file is not read: no record). ``clock_offset``:
    how far the file system's clock is ahead of this node's (``node_io.fs_clock_offset``)."""
    try:
        with open(path, "rb") as f:
            changed_ns = os.fstat(f.fileno()).st_ctime_ns
            raw = f.read(READ_BYTES + 1)
    except OSError:
        return ErrorRecord()
    if len(raw) > READ_BYTES:
        return ErrorRecord()
    record = parse_error_record(raw.decode("utf-8", "replace"))
    return replace(record, written_at=changed_ns / 1e9 - clock_offset)


def parse_error_record(text: str) -> ErrorRecord:
    """dslaunch's record (``traceback``, ``ts``, ``code``), torch's ``@record`` one (``message.message``,
    ``message.extraInfo.py_callstack``, ``.timestamp``: whole seconds as a string), or both merged (the bootstrap
    keeps torch's and adds its own); texts bounded."""
    try:
        data = json.loads(text)
    except ValueError:
        return ErrorRecord()
    if not isinstance(data, dict):
        return ErrorRecord()
    torch = _object(data.get("message"))
    info = _object(torch.get("extraInfo"))
    texts = (data.get("traceback"), info.get("py_callstack"), torch.get("message"))
    error = next((t for t in texts if isinstance(t, str) and t), None)
    failed_at = _seconds(data.get("ts"))
    stamp = info.get("timestamp")
    if failed_at is None and isinstance(stamp, str) and len(stamp) <= _STAMP_DIGITS:
        failed_at = _seconds(ascii_int(stamp))
    code = data.get("code")
    return ErrorRecord(
        error=None if error is None else bounded(error),
        failed_at=failed_at,
        code=code if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 256 else None,
    )


def _object(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}


def _seconds(value: object) -> float | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) else None


def keep_tail(tail: bytes, chunk: bytes) -> bytes:
    """The last ``TAIL_BYTES`` of a rank's stderr, after ``chunk``."""
    return (tail + chunk if len(chunk) < TAIL_BYTES else chunk)[-TAIL_BYTES:]


def tail_lines(raw: bytes) -> tuple[str, ...]:
    """The last lines of a rank's stderr as a terminal showed them (the final state of a \\r line)."""
    lines = raw.decode("utf-8", "replace").split("\n")
    if len(raw) >= TAIL_BYTES:
        lines = lines[1:]  # cut at the front
    if lines and not lines[-1]:
        lines.pop()
    shown = [line.rstrip("\r") for line in lines]
    return tuple(line[line.rfind("\r") + 1 :] for line in shown[-STDERR_TAIL:])
