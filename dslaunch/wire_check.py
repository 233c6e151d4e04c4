"""The one check of every JSON message that crosses a process or a pod (stdlib only): each field's type and range.

A message is a JSON object; a schema names each field and what it may hold. ``fields`` returns the fields
converted (lists to tuples) or raises :class:`Malformed` with why: a field missing, one too many, a bool where an
int goes (``True`` is not ``1`` here), an int out of range, a float that is not finite, a string too long, a list
too long or of the wrong elements. ``loads`` is ``json.loads`` that also turns deep nesting (a recursion error) and
bad UTF-8 into :class:`Malformed`. Nothing here raises anything else, whatever the input.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

INT_MAX = (1 << 63) - 1


class Malformed(ValueError):
    """A message that is not one of the wire's: its text says why."""


class Spec:
    def take(self, value: object) -> Any:  # pragma: no cover - every spec overrides it
        raise NotImplementedError

    def words(self) -> str:  # pragma: no cover
        raise NotImplementedError

    # For ``compiled``: a Python expression true when the value named ``v`` passes ``take``, and one for what
    # ``take`` returns (None: the value itself). ``depth`` names the loop variables of nested lists apart.
    def test(self, v: str, depth: int) -> str:  # pragma: no cover
        raise NotImplementedError

    def conv(self, v: str, depth: int) -> str | None:
        return None


@dataclass(frozen=True)
class Int(Spec):
    lo: int
    hi: int

    def take(self, value: object) -> int:
        if type(value) is not int or not self.lo <= value <= self.hi:
            raise Malformed(self.words())
        return value

    def words(self) -> str:
        return f"an integer in {self.lo}..{self.hi}"

    def test(self, v: str, depth: int) -> str:
        return f"(type({v}) is int and {self.lo!r} <= {v} <= {self.hi!r})"


@dataclass(frozen=True)
class Real(Spec):
    lo: float
    hi: float

    def take(self, value: object) -> float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Malformed(self.words())
        if not (self.lo <= value <= self.hi and math.isfinite(value)):  # the range first: an int past a float's
            raise Malformed(self.words())  # range (JSON's 1e400 written out) makes isfinite raise OverflowError
        return float(value)

    def words(self) -> str:
        return f"a number in {self.lo:g}..{self.hi:g}"

    def test(self, v: str, depth: int) -> str:  # NaN fails the range, as do infinities (the bounds are finite)
        return f"((type({v}) is float or type({v}) is int) and {float(self.lo)!r} <= {v} <= {float(self.hi)!r})"

    def conv(self, v: str, depth: int) -> str:
        return f"float({v})"


class Bool(Spec):
    def take(self, value: object) -> bool:
        if type(value) is not bool:
            raise Malformed(self.words())
        return value

    def words(self) -> str:
        return "true or false"

    def test(self, v: str, depth: int) -> str:
        return f"(type({v}) is bool)"


@dataclass(frozen=True)
class Text(Spec):
    most: int  # characters

    def take(self, value: object) -> str:
        if type(value) is not str or len(value) > self.most:
            raise Malformed(self.words())
        return value

    def words(self) -> str:
        return f"a string of at most {self.most} characters"

    def test(self, v: str, depth: int) -> str:
        return f"(type({v}) is str and len({v}) <= {self.most})"


@dataclass(frozen=True)
class Maybe(Spec):
    inner: Spec

    def take(self, value: object) -> Any:
        return None if value is None else self.inner.take(value)

    def words(self) -> str:
        return f"null or {self.inner.words()}"

    def test(self, v: str, depth: int) -> str:
        return f"({v} is None or {self.inner.test(v, depth)})"

    def conv(self, v: str, depth: int) -> str | None:
        inner = self.inner.conv(v, depth)
        return None if inner is None else f"(None if {v} is None else {inner})"


@dataclass(frozen=True)
class ListOf(Spec):
    inner: Spec
    most: int

    def take(self, value: object) -> tuple[Any, ...]:
        if type(value) is not list or len(value) > self.most:
            raise Malformed(self.words())
        return tuple(self.inner.take(item) for item in value)

    def words(self) -> str:
        return f"a list of at most {self.most} items, each {self.inner.words()}"

    def test(self, v: str, depth: int) -> str:
        inner = self.inner
        if isinstance(inner, (Int, Real)):  # a list of numbers: checked in C (map, min, max, sum), not item by item
            kind = "_INTS" if isinstance(inner, Int) else "_REALS"
            return f"_numbers({v}, {self.most}, {kind}, {inner.lo!r}, {inner.hi!r})"
        if isinstance(inner, Text):
            return f"_texts({v}, {self.most}, {inner.most})"
        x = f"x{depth}"
        return f"(type({v}) is list and len({v}) <= {self.most} and all({inner.test(x, depth + 1)} for {x} in {v}))"

    def conv(self, v: str, depth: int) -> str:
        if isinstance(self.inner, Real):
            return f"tuple(map(float, {v}))"
        x = f"x{depth}"
        inner = self.inner.conv(x, depth + 1)
        return f"tuple({v})" if inner is None else f"tuple([{inner} for {x} in {v}])"


@dataclass(frozen=True)
class Row(Spec):
    """A fixed-length list, each place with its own spec (a tuple on the Python side)."""

    places: tuple[Spec, ...]

    def take(self, value: object) -> tuple[Any, ...]:
        if type(value) is not list or len(value) != len(self.places):
            raise Malformed(self.words())
        return tuple(spec.take(item) for spec, item in zip(self.places, value))

    def words(self) -> str:
        return f"a list of {len(self.places)}: " + ", ".join(p.words() for p in self.places)

    def test(self, v: str, depth: int) -> str:
        places = " and ".join(p.test(f"{v}[{i}]", depth) for i, p in enumerate(self.places))
        return f"(type({v}) is list and len({v}) == {len(self.places)} and {places})"

    def conv(self, v: str, depth: int) -> str:
        taken = [p.conv(f"{v}[{i}]", depth) or f"{v}[{i}]" for i, p in enumerate(self.places)]
        return f"({', '.join(taken)},)"


def fields(
    obj: Mapping[str, object], required: Mapping[str, Spec], optional: Mapping[str, Spec] | None = None
) -> dict[str, Any]:
    """``obj``'s fields, checked and converted: ``required`` must be there, ``optional`` may be, no other may.
    Raises :class:`Malformed` naming the first bad one."""
    optional = optional or {}
    for name in required:
        if name not in obj:
            raise Malformed(f"no field {name!r}")
    taken: dict[str, Any] = {}
    for name, value in obj.items():
        spec = required.get(name) or optional.get(name)
        if spec is None:
            raise Malformed(f"unknown field {name[:40]!r}")
        try:
            taken[name] = spec.take(value)
        except Malformed as exc:
            raise Malformed(f"field {name!r} must be {exc}") from None
    return taken


# ---- compiled checkers: the same checks, without a loop over the fields -----------------------------------------
_INTS = frozenset({int})
_REALS = frozenset({int, float})
_MISSING = object()


def _numbers(v: object, most: int, kinds: frozenset[type], lo: float, hi: float) -> bool:
    """A list of at most ``most`` numbers of ``kinds`` in lo..hi, none NaN: what ``ListOf(Int or Real)`` takes."""
    if type(v) is not list or len(v) > most:
        return False
    if not v:
        return True
    if not kinds.issuperset(map(type, v)):  # bool is a type of its own: refused
        return False
    return lo <= min(v) and max(v) <= hi and math.isfinite(sum(v))  # a NaN that min and max passed over: sum's NaN


def _texts(v: object, most: int, chars: int) -> bool:
    """A list of at most ``most`` strings of at most ``chars`` characters each."""
    if type(v) is not list or len(v) > most:
        return False
    return not v or (set(map(type, v)) == {str} and max(map(len, v)) <= chars)


@dataclass(frozen=True)
class Compiled:
    """One message kind's check, generated once from its specs (:func:`compiled`)."""

    check: Callable[[dict[str, Any]], dict[str, Any]]  # as fields(): the fields checked, or Malformed raised
    fast: Callable[[dict[str, Any]], dict[str, Any] | None]  # the generated code alone: None where it refuses
    source: str


def compiled(
    required: Mapping[str, Spec], optional: Mapping[str, Spec] | None = None, defaults: Mapping[str, Any] | None = None
) -> Compiled:
    """The check :func:`fields` makes, as one generated function of straight-line code per message kind: each field
    looked up once and its type and range tested in one expression, lists of numbers or strings checked in C. It
    passes what :func:`fields` passes (tests/wire/test_field_checks.py fuzzes the two against each other); where it
    refuses, :func:`fields` runs to say why. ``defaults``: filled in for optional fields that are absent."""
    optional, defaults = optional or {}, defaults or {}
    names = [*required, *optional]
    lines = ["def fast(o):"]
    if required:
        lines += ["    try:", *(f"        v{i} = o[{name!r}]" for i, name in enumerate(required))]
        lines += ["    except KeyError:", "        return None"]
    for i, name in enumerate(required):
        lines.append(f"    if not {required[name].test(f'v{i}', 0)}:\n        return None")
    taken = ", ".join(f"{name!r}: {required[name].conv(f'v{i}', 0) or f'v{i}'}" for i, name in enumerate(required))
    lines.append(f"    d = {{{taken}}}")
    lines.append(f"    n = {len(required)}")
    for i, name in enumerate(optional, start=len(required)):
        spec = optional[name]
        lines += [f"    v{i} = o.get({name!r}, _MISSING)", f"    if v{i} is not _MISSING:"]
        lines += [f"        if not {spec.test(f'v{i}', 0)}:", "            return None"]
        lines += [f"        d[{name!r}] = {spec.conv(f'v{i}', 0) or f'v{i}'}", "        n += 1"]
        if name in defaults:
            lines += ["    else:", f"        d[{name!r}] = _defaults[{name!r}]"]
    lines += ["    return d if len(o) == n else None"]
    source = "\n".join(lines) + "\n"
    space: dict[str, Any] = {"_MISSING": _MISSING, "_INTS": _INTS, "_REALS": _REALS, "_defaults": dict(defaults)}
    space.update(_numbers=_numbers, _texts=_texts)
    exec(compile(source, f"<wire_check.compiled {'/'.join(names)[:60]}>", "exec"), space)
    fast: Callable[[dict[str, Any]], dict[str, Any] | None] = space["fast"]

    def check(obj: dict[str, Any]) -> dict[str, Any]:
        got = fast(obj)
        if got is None:  # refused: the reference check says why (and raises)
            got = {**defaults, **fields(obj, required, optional)}
        return got

    return Compiled(check, fast, source)


def loads(raw: str | bytes) -> object:
    """``json.loads``, with anything it raises (bad JSON, bad UTF-8, nesting deep enough to recurse out) as
    :class:`Malformed`."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise Malformed(f"not JSON ({type(exc).__name__})") from None


def load_object(raw: str | bytes) -> dict[str, Any]:
    obj = loads(raw)
    if type(obj) is not dict:
        raise Malformed("not a JSON object")
    return obj


# Control messages (``{"t": KIND, ...}``) by kind: each kind's required fields, then its optional fields
Kinds = Mapping[str, tuple[Mapping[str, Spec], Mapping[str, Spec]]]


def control(line: str | bytes, kinds: Kinds) -> dict[str, Any]:
    """A control message of one of ``kinds``, its fields checked (the pods' and the Slurm tasks' links); raises
    :class:`Malformed`."""
    obj = load_object(line)
    kind = obj.pop("t", None)
    if type(kind) is not str or kind not in kinds:
        raise Malformed(f"no message kind {str(kind)[:40]!r}")
    required, optional = kinds[kind]
    return {"t": kind, **fields(obj, required, optional)}


@dataclass
class Rejects:
    """The malformed messages one side has seen: counted, and the first one's reason kept (for one debug line)."""

    count: int = 0
    first: str | None = None

    def note(self, why: str) -> bool:
        """Count one; True for the first, which the caller logs."""
        self.count += 1
        if self.first is None:
            self.first = why
            return True
        return False
