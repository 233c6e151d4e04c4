"""Module loggers and process set-up; the two sinks (console, per-process JSON file) are in ``_sinks``.

Every module has its own ``Logger`` subclass (``bind()`` children share it);
:func:`configure` replaces its disabled level methods with a bare no-op. Enabled records run a
structlog processor chain (imported on the first enabled record) and go to stderr and, with a log
dir, a JSON-lines file.
dslaunch never calls ``structlog.configure()`` and never touches the root logger.
"""

from __future__ import annotations

import atexit
import os
import sys
import time

from dslaunch.limits import ascii_int
from dslaunch.logs import spec as S
from dslaunch.logs._sinks import _STATE, _after_fork, _flush_file, state, write
from dslaunch.oslib.owner_only import private_dir, private_open

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


class Logger:
    """A dslaunch module logger; structlog-style: ``log.info("event", key=value)``."""

    __slots__ = ("_context",)
    name = ""
    _level = S.WARNING

    def __init__(self, context: Mapping[str, Any] | None = None) -> None:
        self._context = dict(context or {})

    def bind(self, **kw: Any) -> Logger:
        return self.__class__({**self._context, **kw})

    def unbind(self, *keys: str) -> Logger:
        return self.__class__({k: v for k, v in self._context.items() if k not in keys})

    def new(self, **kw: Any) -> Logger:
        return self.__class__(kw)

    def is_enabled_for(self, level: int) -> bool:
        return level >= self._level

    isEnabledFor = is_enabled_for  # stdlib spelling, for code written against logging.Logger

    def debug(self, event: str, *args: Any, **kw: Any) -> None:
        if self._level > 10:
            return None
        _emit(self, 10, event, args, kw)

    def info(self, event: str, *args: Any, **kw: Any) -> None:
        if self._level > 20:
            return None
        _emit(self, 20, event, args, kw)

    def warning(self, event: str, *args: Any, **kw: Any) -> None:
        if self._level > 30:
            return None
        _emit(self, 30, event, args, kw)

    warn = warning

    def error(self, event: str, *args: Any, **kw: Any) -> None:
        if self._level > 40:
            return None
        _emit(self, 40, event, args, kw)

    def critical(self, event: str, *args: Any, **kw: Any) -> None:
        if self._level > 50:
            return None
        _emit(self, 50, event, args, kw)

    def exception(self, event: str, *args: Any, **kw: Any) -> None:
        kw.setdefault("exc_info", True)
        self.error(event, *args, **kw)

    def log(self, level: int, event: str, *args: Any, **kw: Any) -> None:
        if level >= self._level:
            _emit(self, level, event, args, kw)

    def __repr__(self) -> str:
        return f"<dslaunch logger {self.name} level={S.LEVEL_NAMES.get(self._level, self._level)}>"


def _nop(self: Any, event: str = "", *args: Any, **kw: Any) -> None:
    return None


_METHODS = (
    ("debug", S.DEBUG),
    ("info", S.INFO),
    ("warning", S.WARNING),
    ("warn", S.WARNING),
    ("error", S.ERROR),
    ("exception", S.ERROR),
    ("critical", S.CRITICAL),
)


def _set_level(cls: type[Logger], level: int) -> None:
    """Disabled level methods become a bare no-op on the module's class: a disabled call is one empty call."""
    cls._level = level
    for method, method_level in _METHODS:
        setattr(cls, method, _nop if method_level < level else getattr(Logger, method))


_CLASSES: dict[str, type[Logger]] = {}
_LOGGERS: dict[str, Logger] = {}


def _check_name(name: str) -> str:
    if name.startswith("py:"):
        raise ValueError(f"{name!r}: py: names are stdlib loggers; use logging.getLogger({name[3:]!r})")
    try:
        return S.check_module(name, name)
    except S.SpecError as exc:
        raise ValueError(f"{exc}; your own code can use get_logger('user.NAME')") from None


def get_logger(module: str) -> Logger:
    """The logger ``dslaunch.<module>``, e.g. ``get_logger("mesh")`` or ``get_logger("user.trainer")``."""
    found = _LOGGERS.get(module)
    if found is not None:
        return found
    name = _check_name(module)
    if not _STATE.configured:  # a rank started without the bootstrap (--no-python, torchrun) still is a rank
        configure_from_env(os.environ, role="rank" if "RANK" in os.environ else "process")
    cls = _CLASSES.get(name)
    if cls is None:
        cls = type(f"Logger_{name.replace('.', '_')}", (Logger,), {"__slots__": (), "name": name})
        _set_level(cls, _STATE.spec.level_for(name, _STATE.channels_on))
        _CLASSES[name] = cls
    _LOGGERS[module] = _LOGGERS[name] = logger = cls()
    return logger


def _bool(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def configure(
    spec: S.LogSpec | str = "warning",
    *,
    role: str = "process",
    fmt: str = "console",
    color: bool = False,
    ranks: S.RankFilter | str = "0",
    log_dir: str | None = None,
    channels: frozenset[str] | set[str] = frozenset(),
    facts: Mapping[str, Any] | None = None,
) -> None:
    """Set levels, format and sinks for this process. ``role`` is launcher, agent, rank or process."""
    st = _STATE
    st.spec = S.parse_spec(spec) if isinstance(spec, str) else spec
    st.channels_on = frozenset(channels)
    st.json_console = fmt == "json"
    st.color = color
    facts = dict(facts or {})
    st.static = {
        "rank": facts.get("rank"),
        "local_rank": facts.get("local_rank"),
        "node_rank": facts.get("node_rank"),
        "world_size": facts.get("world_size"),
        "host": facts.get("host") or _hostname(),
        "pid": os.getpid(),
        "run_id": facts.get("run_id"),
    }
    filt = S.parse_ranks(ranks) if isinstance(ranks, str) else ranks
    st.console_all_levels = (
        role != "rank"
        or st.static["rank"] is None
        or filt.selects(int(st.static["rank"]), st.static["local_rank"], st.static["node_rank"])
    )
    st.who = _who(role, st.static, facts)
    if st.file is not None:
        st.file.close()
        st.file = None
    if log_dir:
        private_dir(log_dir)  # records hold exported names, tracebacks, paths: 0700/0600 whatever the umask
        # Agents leave with os._exit (no atexit flush) and log little: line-buffered.
        buffering = 1 << 16 if role in ("rank", "process") else 1
        path = os.path.join(log_dir, _file_name(role, st.static))
        st.file = private_open(path, "a", encoding="utf-8", buffering=buffering)
    for name, cls in _CLASSES.items():
        _set_level(cls, st.spec.level_for(name, st.channels_on))
    if not st.configured:
        atexit.register(shutdown)
        os.register_at_fork(before=_flush_file, after_in_child=_after_fork)
    st.configured = True
    _apply_stdlib_levels()


def _hostname() -> str:
    import socket  # only where the launcher named no host (DSLAUNCH_HOST): a rank spares the import

    return socket.gethostname()


def _who(role: str, static: Mapping[str, Any], facts: Mapping[str, Any]) -> str:
    host = static["host"]
    if role == "rank" and static["rank"] is not None:
        return f"{host}:{static['rank']}"
    if role == "agent":
        return f"{host}:agent{facts.get('node_rank', '')}"
    return f"{host}:{role}"


def _file_name(role: str, static: Mapping[str, Any]) -> str:
    if role == "rank" and static["rank"] is not None:
        return f"rank{static['rank']}.jsonl"
    if role == "agent":
        return f"agent{static['node_rank'] or 0}.jsonl"
    return f"{role}.{static['pid']}.jsonl" if role == "process" else f"{role}.jsonl"


def configure_from_env(env: Mapping[str, str], *, role: str = "rank", strict: bool = False) -> None:
    """Configure from DSLAUNCH_LOG_* (set by the launcher). A bad spec raises ValueError if ``strict``."""
    text = env.get("DSLAUNCH_LOG_LEVEL", "").strip() or "warning"
    try:
        spec = S.parse_spec(text)
    except S.SpecError as exc:
        if strict:
            raise ValueError(f"DSLAUNCH_LOG_LEVEL={text!r}: {exc}") from None
        spec = S.LogSpec()
        print(f"dslaunch: ignoring DSLAUNCH_LOG_LEVEL: {exc}", file=sys.stderr)
    ranks_text = env.get("DSLAUNCH_LOG_RANKS", "").strip() or "0"
    try:
        ranks = S.parse_ranks(ranks_text)
    except S.SpecError as exc:
        if strict:
            raise ValueError(f"DSLAUNCH_LOG_RANKS={ranks_text!r}: {exc}") from None
        ranks = S.parse_ranks("0")
        print(f"dslaunch: ignoring DSLAUNCH_LOG_RANKS (rank 0 logs): {exc}", file=sys.stderr)
    channels = {ch for ch, switch in S.CHANNELS.items() if _bool(env.get(f"DSLAUNCH_{switch.upper()}"))}
    facts: dict[str, Any] = {"host": env.get("DSLAUNCH_HOST"), "run_id": env.get("DSLAUNCH_RUN_ID")}
    if "RANK" in env:
        for key in ("rank", "local_rank", "node_rank", "world_size"):
            value = env.get(key.upper())
            facts[key] = ascii_int(value) if value else None
    elif role == "agent":
        facts["node_rank"] = ascii_int(env.get("NODE_RANK", ""))
    configure(
        spec,
        role=role,
        fmt=env.get("DSLAUNCH_LOG_FORMAT", "console"),
        color=_bool(env.get("DSLAUNCH_LOG_COLOR")),
        ranks=ranks,
        log_dir=env.get("DSLAUNCH_LOG_DIR") or None,
        channels=channels,
        facts=facts,
    )


def configure_agent(plan_env: Any, node_rank: int, host: str, run_id: str) -> None:
    """A node agent logs per the plan's env (not its own: a remote shell's env differs)."""
    env = dict(plan_env)
    env.update(NODE_RANK=str(node_rank), DSLAUNCH_HOST=host, DSLAUNCH_RUN_ID=run_id)
    env.pop("RANK", None)
    configure_from_env(env, role="agent")


def set_levels(text: str) -> None:
    """Change levels at run time with the same grammar; unnamed modules keep their levels."""
    _STATE.spec = S.parse_spec(text).merged_over(_STATE.spec)
    for name, cls in _CLASSES.items():
        _set_level(cls, _STATE.spec.level_for(name, _STATE.channels_on))
    _apply_stdlib_levels()


# ---- emitting ------------------------------------------------------------------


def _emit(logger: Logger, level: int, event: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
    if args:
        try:
            event = event % args
        except (TypeError, ValueError):
            event = f"{event} {args!r}"
    ed: dict[str, Any] = {"ts": time.time(), "level": level, "logger": logger.name, "event": event}
    ed.update(_STATE.static)
    for source in (logger._context, kw):
        for key, value in source.items():
            ed[f"_{key}" if ed.get(key) is not None and key != "exc_info" else key] = value
    write(level, ed)


def file_record(module: str, event: str, **kw: Any) -> None:
    """An ERROR record for this process's log file only (if it has one): for what must not wait on stderr."""
    st = _STATE
    if st.file is None:
        return
    from dslaunch.logs import render

    ed: dict[str, Any] = {"ts": time.time(), "level": S.ERROR, "logger": get_logger(module).name, "event": event}
    ed.update(st.static)
    ed.update(kw)
    with st.lock:
        st.file.write(render.json_line(ed))
        st.file.flush()


_AT_SHUTDOWN: list[Callable[[], None]] = []


def at_shutdown(hook: Callable[[], None]) -> None:
    """Run ``hook`` first in :func:`shutdown` (the channels' comm summary registers itself here)."""
    if hook not in _AT_SHUTDOWN:
        _AT_SHUTDOWN.append(hook)


def shutdown() -> None:
    """Print the comm summary (if enabled) and flush the file sink; runs at exit."""
    for hook in _AT_SHUTDOWN:
        hook()
    if _STATE.file is not None:
        try:
            _STATE.file.flush()
        except (OSError, ValueError):
            pass


def _apply_stdlib_levels() -> None:
    if "dslaunch.logs.routing" not in sys.modules and not any(m.startswith("py:") for m, _ in _STATE.spec.modules):
        return  # nothing routed and nothing to route: spare the launcher the stdlib logging import
    _routing().apply_levels()


def setup_rank(env: Any = None) -> None:
    """Everything a rank needs, from the launcher's env: levels, sinks, warnings and torch routing. ``logging`` is
    left to whatever imports it first (torch, the script, the first warning): warnings are routed right then."""
    from dslaunch.logs import on_import

    configure_from_env(os.environ if env is None else env, role="rank", strict=True)
    on_import.after_import("logging", _route_warnings)
    on_import.hold_warnings("logging")
    on_import.after_import("torch", _route_torch)
    get_logger("bootstrap").debug("logging configured", spec=state().spec.canonical(), started=round(time.time(), 3))


def _route_warnings() -> None:
    from dslaunch.logs import on_import

    routing = _routing()
    put_back = on_import.release_warnings()  # logging's capture wraps Python's own showwarning, as it would have
    routing.route_warnings()
    put_back()


def _route_torch() -> None:
    _routing().route_torch()


def _routing() -> Any:
    """``dslaunch.logs.routing``, with ``logging`` imported first: a rank's after-import hook for ``logging`` then
    finds the routing module whole (imported from inside routing's own ``import logging``, it would not be)."""
    import logging  # noqa: F401

    from dslaunch.logs import routing

    return routing


_ = S  # re-exported names live in dslaunch.logs
