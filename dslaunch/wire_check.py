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
from collections.abc import Mapping
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


class Bool(Spec):
    def take(self, value: object) -> bool:
        if type(value) is not bool:
            raise Malformed(self.words())
        return value

    def words(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Text(Spec):
    most: int  # characters

    def take(self, value: object) -> str:
        if type(value) is not str or len(value) > self.most:
            raise Malformed(self.words())
        return value

    def words(self) -> str:
        return f"a string of at most {self.most} characters"


@dataclass(frozen=True)
class Maybe(Spec):
    inner: Spec

    def take(self, value: object) -> Any:
        return None if value is None else self.inner.take(value)

    def words(self) -> str:
        return f"null or {self.inner.words()}"


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
