"""What a failed rank left behind: its error file (the bootstrap's, or torch's ``@record``) and its stderr's tail."""

from __future__ import annotations

import json
from dataclasses import dataclass

STDERR_TAIL = 20  # lines of a failed rank's stderr in the summary
TAIL_BYTES = 16 << 10  # raw stderr kept per rank for those lines


@dataclass(frozen=True)
class ErrorRecord:
    """The failure's text and, when the bootstrap wrote it, the time the rank failed and its exit code."""

    error: str | None = None
    failed_at: float | None = None  # time.time() of the failure
    code: int | None = None


def read_error_file(path: str) -> ErrorRecord:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, ValueError):
        return ErrorRecord()
    return parse_error_record(text)


def parse_error_record(text: str) -> ErrorRecord:
    try:
        data = json.loads(text)
    except ValueError:
        return ErrorRecord()
    if not isinstance(data, dict):
        return ErrorRecord()
    message = data.get("message")  # torch's @record: {"message": {"message": ..., "extraInfo": {"py_callstack"}}}
    if isinstance(message, dict):
        info = message.get("extraInfo")
        callstack = info.get("py_callstack") if isinstance(info, dict) else None
        return ErrorRecord(error=callstack if isinstance(callstack, str) else None)
    traceback, ts, code = data.get("traceback"), data.get("ts"), data.get("code")
    return ErrorRecord(
        error=traceback if isinstance(traceback, str) else None,
        failed_at=float(ts) if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None,
        code=code if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 256 else None,
    )


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
