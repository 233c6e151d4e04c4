"""The ``--log-level`` grammar, the ``--log-ranks`` filter and the colour choice (pure, stdlib only).

Every rank imports this module before its script runs, so it stays cheap to import: no ``dataclasses`` (with
``inspect``, about 10 ms of CPU) and no ``re`` or ``difflib`` until a spec needs them (the default spec and
``--log-ranks`` of plain numbers never do); tests/bootstrap/test_rank_imports.py checks it.

spec := item ("," item)*           whitespace around items is ignored
item := LEVEL                       default for every module          info
      | MODULE "=" LEVEL            a module and everything under it  comm=debug
      | "+" MODULE | "-" MODULE     debug / error (TORCH_LOGS habit)  +comm,-agent
MODULE := ALIAS ("." ident)*  |  "py:" QNAME   (any other stdlib logger)
"""

from __future__ import annotations

from dslaunch.errors import DslaunchError

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping

DEBUG, INFO, WARNING, ERROR, CRITICAL, OFF = 10, 20, 30, 40, 50, 100
LEVELS: dict[str, int] = {
    "debug": DEBUG,
    "info": INFO,
    "warning": WARNING,
    "error": ERROR,
    "critical": CRITICAL,
    "off": OFF,
}
_ALIASES = {"warn": "warning", "fatal": "critical"}
LEVEL_NAMES: dict[int, str] = {v: k for k, v in LEVELS.items()}
DEFAULT_LEVEL = WARNING

MODULES: dict[str, str] = {
    "launcher": "the dslaunch CLI: options, hosts chosen, commands run, teardown",
    "runner": "transports that start node agents (runner.local, runner.ssh, ...)",
    "agent": "the per-node agent: spawning ranks, signals, exit codes",
    "bootstrap": "per-rank start-up: env, logging, rendezvous",
    "mesh": "device-mesh construction and rank coordinates",
    "comm": "collectives through dslaunch's comm layer (debug: one record per call)",
    "comm.summary": "per-op collective summary at exit (on by default with comms_logger)",
    "timers": "wall-clock breakdown (on by default with --wall-clock-breakdown)",
    "user": "your own code: dslaunch.get_logger('user') or get_logger('user.NAME')",
    "torch": "torch's own stdlib loggers (unless TORCH_LOGS is set)",
    "py:NAME": "any other stdlib logger, e.g. py:urllib3 or py:warnings (Python warnings)",
}
TOP_MODULES = tuple(m for m in MODULES if "." not in m and ":" not in m)
# Data channels print at info when their switch is on, whatever the default level.
CHANNELS: dict[str, str] = {"timers": "wall_clock_breakdown", "comm.summary": "comms_logger"}

_HINT = "(run `dslaunch --log-level help`; any stdlib logger: py:NAME=LEVEL)"


class SpecError(DslaunchError):
    """A bad logging spec; the message names the bad item and what is valid."""


def _dotted_names(text: str) -> bool:
    """``text`` is ASCII identifiers joined by dots (``[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*``)."""
    return all(part.isascii() and part.isidentifier() for part in text.split("."))


class _Frozen:
    """A frozen value class, as ``@dataclass(frozen=True)`` makes one: built by keyword or position, compared,
    hashed and printed by its fields, never assigned to."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self._FIELDS)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __reduce__(self) -> tuple[object, ...]:  # pickle and copy build it anew (slots are never assigned)
        return (self.__class__, self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in zip(self._FIELDS, self._values()))
        return f"{self.__class__.__qualname__}({fields})"


class LogSpec(_Frozen):
    __slots__ = ("default", "modules")
    _FIELDS = __slots__
    default: int | None  # None: not set here (falls back to a lower source, then warning)
    modules: tuple[tuple[str, int], ...]  # sorted by module name

    def __init__(self, default: int | None = None, modules: tuple[tuple[str, int], ...] = ()) -> None:
        object.__setattr__(self, "default", default)
        object.__setattr__(self, "modules", modules)

    def merged_over(self, lower: LogSpec) -> LogSpec:
        """This spec's settings win key by key; ``lower`` fills what this one leaves unset."""
        mods = dict(lower.modules)
        mods.update(self.modules)
        return LogSpec(self.default if self.default is not None else lower.default, tuple(sorted(mods.items())))

    def canonical(self) -> str:
        items = [LEVEL_NAMES[self.default if self.default is not None else DEFAULT_LEVEL]]
        return ",".join(items + [f"{m}={LEVEL_NAMES[lv]}" for m, lv in self.modules])

    def level_for(self, module: str, channels_on: frozenset[str] = frozenset()) -> int:
        """The effective level: longest explicitly set prefix, else an active channel's info, else the default."""
        mods = dict(self.modules)
        names = [module]
        while "." in names[-1]:
            names.append(names[-1].rpartition(".")[0])
        for name in names:
            if name in mods:
                return mods[name]
        if any(name in channels_on for name in names):
            return INFO
        return self.default if self.default is not None else DEFAULT_LEVEL


def parse_level(text: str, item: str) -> int:
    word = text.strip().lower()
    word = _ALIASES.get(word, word)
    if word not in LEVELS:
        raise SpecError(f"unknown level {text.strip()!r} in {item!r} (levels: {', '.join(LEVELS)})")
    return LEVELS[word]


def check_module(name: str, item: str) -> str:
    """Canonical module name, or SpecError with a close-match suggestion."""
    if name.startswith("py:"):
        qname = name[3:]
        if not _dotted_names(qname):
            raise SpecError(f"bad stdlib logger name {qname!r} in {item!r} (expected e.g. py:urllib3.connectionpool)")
        return name
    low = name.lower()
    if not _dotted_names(low):  # lower-cased: [a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*
        raise SpecError(f"bad module name {name!r} in {item!r} (expected e.g. comm or user.trainer) {_HINT}")
    top = low.partition(".")[0]
    if top not in TOP_MODULES:
        import difflib

        close = difflib.get_close_matches(top, TOP_MODULES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; modules: {', '.join(TOP_MODULES)}"
        raise SpecError(f"unknown module {top!r} in {item!r}{hint} {_HINT}")
    return low


def _parse_item(item: str) -> tuple[str | None, int]:
    if item[0] in "+-":
        body = item[1:].strip()
        if "=" in body:
            raise SpecError(f"{item!r}: use either '{item[0]}{body.partition('=')[0]}' or '{body}', not both")
        if not body:
            raise SpecError(f"missing module after {item[0]!r} in {item!r}")
        return check_module(body, item), DEBUG if item[0] == "+" else ERROR
    if "=" in item:
        name, _, level = item.partition("=")
        if not name.strip():
            raise SpecError(f"missing module before '=' in {item!r}")
        if not level.strip():
            raise SpecError(f"missing level after '=' in {item!r} (levels: {', '.join(LEVELS)})")
        return check_module(name.strip(), item), parse_level(level, item)
    word = item.lower()
    if _ALIASES.get(word, word) in LEVELS:
        return None, LEVELS[_ALIASES.get(word, word)]
    if word in TOP_MODULES or word.startswith("py:"):
        raise SpecError(f"{item!r} has no level; write '{item}=info' or '+{item}' (debug)")
    import difflib

    close = difflib.get_close_matches(word, [*LEVELS, *TOP_MODULES], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise SpecError(
        f"cannot parse item {item!r}{hint} (an item is LEVEL, MODULE=LEVEL, +MODULE or -MODULE; "
        f"levels: {', '.join(LEVELS)})"
    )


def parse_spec(text: str) -> LogSpec:
    """Parse a spec; raise SpecError naming the bad item and what is valid."""
    if not text.strip():
        raise SpecError(f"empty log spec (e.g. 'info' or 'warning,comm=debug'; levels: {', '.join(LEVELS)})")
    default: int | None = None
    default_word = ""
    mods: dict[str, int] = {}
    for index, raw in enumerate(text.split(","), 1):
        item = raw.strip()
        if not item:
            raise SpecError(f"empty item #{index} in {text!r} (stray comma?)")
        module, level = _parse_item(item)
        if module is None:
            if default is not None:
                raise SpecError(f"default level given twice ({default_word!r} and {item!r}) in {text!r}")
            default, default_word = level, item
        elif module in mods:
            raise SpecError(f"module {module!r} set twice in {text!r}")
        else:
            mods[module] = level
    return LogSpec(default, tuple(sorted(mods.items())))


def help_text() -> str:
    width = max(len(m) for m in MODULES)
    lines = [
        "dslaunch --log-level SPEC: a comma list of LEVEL, MODULE=LEVEL, +MODULE (debug), -MODULE (error).",
        f"Levels: {', '.join(LEVELS)} (default: warning). The most specific setting wins;",
        "--log-level beats DSLAUNCH_LOG_LEVEL, which beats log_level in the --config file.",
        "Examples: info | comm=debug | warning,comm=debug,launcher=info | +comm,-agent | timers=off",
        "",
        "Modules:",
    ]
    lines += [f"  {m:<{width}}  {d}" for m, d in MODULES.items()]
    return "\n".join(lines)


# ---- --log-ranks -----------------------------------------------------------


class RankFilter(_Frozen):
    """Global ranks and ranges, plus ``local:``/``node:`` ranges (local rank 0 of every node, node 0)."""

    __slots__ = ("everyone", "ranges")
    _FIELDS = __slots__
    everyone: bool
    ranges: tuple[tuple[str, int, int], ...]  # (kind, low, high), inclusive; kind: "", "local", "node"

    def __init__(self, everyone: bool = False, ranges: tuple[tuple[str, int, int], ...] = ()) -> None:
        object.__setattr__(self, "everyone", everyone)
        object.__setattr__(self, "ranges", ranges)

    def selects(self, rank: int, local_rank: int | None = None, node_rank: int | None = None) -> bool:
        if self.everyone:
            return True
        values = {"": rank, "local": local_rank, "node": node_rank}
        return any(
            values[kind] is not None and lo <= values[kind] <= hi  # type: ignore[operator]
            for kind, lo, hi in self.ranges
        )

    def canonical(self) -> str:
        if self.everyone:
            return "all"
        if not self.ranges:
            return "none"
        return ",".join(
            (f"{kind}:" if kind else "") + (str(lo) if lo == hi else f"{lo}-{hi}") for kind, lo, hi in self.ranges
        )


def parse_ranks(text: str) -> RankFilter:
    word = text.strip().lower()
    if word == "all":
        return RankFilter(everyone=True)
    if word == "none":
        return RankFilter()
    if word.isascii() and word.isdigit():  # one rank, the default "0": what the pattern below reads, without re
        return RankFilter(ranges=(("", int(word), int(word)),))
    import re

    ranges = []
    for raw in word.split(","):
        item = raw.strip()
        m = re.fullmatch(r"(?:(local|node):)?([0-9]+)(?:-([0-9]+))?", item)
        if not m:
            raise SpecError(
                f"bad rank item {item!r} in {text!r} (expected 'all', 'none', or global ranks and "
                f"ranges like 0,8-15, or local:0 / node:0-1)"
            )
        lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
        if hi < lo:
            raise SpecError(f"empty rank range {item!r} in {text!r} (write low-high)")
        ranges.append((m.group(1) or "", lo, hi))
    return RankFilter(ranges=tuple(sorted(ranges)))


def decide_color(choice: str, isatty: bool, env: Mapping[str, str]) -> bool:
    """auto: colour on a terminal; NO_COLOR turns it off and wins over FORCE_COLOR."""
    if choice in ("always", "never"):
        return choice == "always"
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    return isatty
