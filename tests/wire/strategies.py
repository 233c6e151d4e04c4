"""Hypothesis strategies from wire_check's specs: values each spec takes, and JSON values of any shape."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from dslaunch.wire_check import Bool, Int, ListOf, Maybe, Real, Row, Spec, Text

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# what sits near a spec's edges: a bound, one past it, a float where an int goes, a bool, NaN, a huge integer
EDGES = st.sampled_from([0, -1, 1, 255, 256, 1 << 20, (1 << 20) + 1, (1 << 63) - 1, 1 << 63, 10**400, 1e12, 1.5e12])
ODD = JSON | EDGES | st.sampled_from([True, False, float("nan"), float("inf"), -0.0, "", [], {}, [[]], ["x"] * 3])


def valid(spec: Spec) -> st.SearchStrategy[Any]:  # noqa: PLR0911 - one return a kind of spec
    """JSON values ``spec`` takes (as the wire's JSON gives them: lists, not tuples)."""
    if isinstance(spec, Int):
        return st.integers(spec.lo, spec.hi)
    if isinstance(spec, Real):
        lo, hi = spec.lo, spec.hi
        return st.floats(lo, hi, allow_nan=False) | st.integers(int(lo), int(hi))
    if isinstance(spec, Bool):
        return st.booleans()
    if isinstance(spec, Text):
        return st.text(max_size=min(spec.most, 12))
    if isinstance(spec, Maybe):
        return st.none() | valid(spec.inner)
    if isinstance(spec, ListOf):
        return st.lists(valid(spec.inner), max_size=min(spec.most, 5))
    if isinstance(spec, Row):
        return st.tuples(*(valid(p) for p in spec.places)).map(list)
    raise AssertionError(f"no strategy for {spec!r}")


def edge(spec: Spec) -> st.SearchStrategy[Any]:  # noqa: PLR0911 - one return a kind of spec
    """Values at a spec's bounds and just past them: the last character, item or integer it takes, and one more."""
    if isinstance(spec, Int):
        return st.sampled_from([spec.lo, spec.hi, spec.lo - 1, spec.hi + 1, float(spec.lo)])
    if isinstance(spec, Real):
        lo, hi = float(spec.lo), float(spec.hi)
        return st.sampled_from([lo, hi, int(lo), int(hi), lo - 1, hi + 1, hi * 2, float("nan"), float("inf"), True])
    if isinstance(spec, Text):
        return st.sampled_from(["x" * spec.most, "x" * (spec.most + 1)])
    if isinstance(spec, Maybe):
        return st.none() | edge(spec.inner)
    if isinstance(spec, ListOf):
        lengths = [spec.most, spec.most + 1] if spec.most <= 4096 else []
        full = st.tuples(valid(spec.inner), st.sampled_from(lengths)).map(lambda t: [t[0]] * t[1]) if lengths else None
        one_odd = edge(spec.inner).map(lambda v: [v])
        return one_odd if full is None else one_odd | full
    if isinstance(spec, Row):
        places = [
            st.tuples(*(edge(p) if i == at else valid(p) for i, p in enumerate(spec.places))).map(list)
            for at in range(len(spec.places))
        ]
        return st.one_of(*places) | valid(spec).map(lambda v: [*v, 0]) | valid(spec).map(lambda v: v[:-1])
    return valid(spec)


def near(spec: Spec) -> st.SearchStrategy[Any]:
    """Values that are valid, or almost: a valid one, or an odd one, or a list with one odd item."""
    if isinstance(spec, (ListOf, Row)):
        one_off = st.tuples(valid(spec), ODD, st.integers(0, 5)).map(
            lambda t: [*t[0][: t[2]], t[1], *t[0][t[2] + 1 :]] if t[0] else [t[1]]
        )
        return valid(spec) | one_off | edge(spec) | ODD
    return valid(spec) | edge(spec) | ODD


def fields_of(required: dict[str, Spec], optional: dict[str, Spec]) -> st.SearchStrategy[dict[str, Any]]:
    """A valid object of these fields: every required one, some of the optional ones."""
    return st.fixed_dictionaries(
        {k: valid(v) for k, v in required.items()}, optional={k: valid(v) for k, v in optional.items()}
    )
