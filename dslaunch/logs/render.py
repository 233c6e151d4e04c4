"""Rendering one record: a console line (text, optional colour) or a JSON line (pure, cached serializer)."""

from __future__ import annotations

import sys
import time

from dslaunch.logs import spec as S

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_HIDDEN = frozenset(("ts", "level", "logger", "event", "exception", "_exc_text"))
_LETTER = {S.DEBUG: "D", S.INFO: "I", S.WARNING: "W", S.ERROR: "E", S.CRITICAL: "C"}
_COLOR = {S.DEBUG: "\x1b[2m", S.INFO: "\x1b[32m", S.WARNING: "\x1b[33m", S.ERROR: "\x1b[31m", S.CRITICAL: "\x1b[1;31m"}
_RESET, _DIM = "\x1b[0m", "\x1b[2m"
_CACHE: dict[str, Any] = {}  # structlog objects, built with the first record that needs them


def attach_exception(ed: dict[str, Any], exc: Any) -> dict[str, Any]:
    if exc is True:
        exc = sys.exc_info()
    elif isinstance(exc, BaseException):
        exc = (type(exc), exc, exc.__traceback__)
    if not isinstance(exc, tuple) or exc[0] is None:
        return ed
    if "exc" not in _CACHE:
        from structlog.tracebacks import ExceptionDictTransformer

        _CACHE["exc"] = ExceptionDictTransformer(show_locals=False)
    import traceback

    ed["exception"] = _CACHE["exc"](exc)
    ed["_exc_text"] = "".join(traceback.format_exception(*exc)).rstrip()
    return ed


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e6):06d}Z"


def json_line(ed: dict[str, Any]) -> str:
    if "json" not in _CACHE:
        _CACHE["json"] = _serializer()
    out = dict(ed)
    out["ts"] = _iso(ed["ts"])
    out["level"] = S.LEVEL_NAMES.get(ed["level"], str(ed["level"]))
    out.pop("_exc_text", None)
    line: str = _CACHE["json"](out)
    return line + "\n"


def _serializer() -> Any:
    """structlog's JSONRenderer over orjson when installed (about 2x faster), else json.dumps."""
    from structlog.processors import JSONRenderer

    try:
        import orjson

        opts = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

        def dumps(obj: Any, default: Any = repr) -> str:
            return orjson.dumps(obj, default=default, option=opts).decode()

        renderer = JSONRenderer(serializer=dumps)
    except ImportError:
        renderer = JSONRenderer(ensure_ascii=False)
    return lambda ed: renderer(None, "", ed)


def console_line(ed: dict[str, Any], color: bool, who: str, static: Mapping[str, Any]) -> str:
    level = ed["level"]
    ts = ed["ts"]
    stamp = time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts % 1 * 1000):03d}"
    letter = _LETTER.get(level, "?")
    extras = " ".join(
        f"{_shown(k, static)}={_value(v)}"
        for k, v in ed.items()
        if k not in _HIDDEN and not (k in static and static[k] == v)
    )
    if color:
        head = f"{_DIM}{stamp}{_RESET} {_COLOR.get(level, '')}{letter}{_RESET} [{who}] {_DIM}{ed['logger']}:{_RESET} "
    else:
        head = f"{stamp} {letter} [{who}] {ed['logger']}: "
    line = head + str(ed["event"]) + (" " + extras if extras else "")
    text = ed.get("_exc_text")
    return line + ("\n" + text if text else "") + "\n"


def _shown(key: str, static: Mapping[str, Any]) -> str:
    """A user field named like a fact of this process (``rank``) is kept as ``_rank`` in the record, beside the
    fact; the console, which shows the facts in its prefix, prints it under the name it was given."""
    return key[1:] if key.startswith("_") and key[1:] in static else key


def _value(v: Any) -> str:
    if isinstance(v, str):
        return v if v and " " not in v and "=" not in v else repr(v)
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
