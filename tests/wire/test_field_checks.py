"""The specs every wire message's fields are checked with (dslaunch/wire_check.py): each takes what it says and
nothing else, and each kind's compiled checker takes exactly what ``fields`` takes (fuzzed against each other);
events are checked with them in tests/wire/test_decoder.py."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch import wire
from dslaunch.pods import messages
from dslaunch.wire_check import Bool, Int, ListOf, Malformed, Maybe, Real, Row, Spec, Text, compiled, fields, loads
from tests.wire.strategies import ODD, fields_of, near


def test_the_specs_take_what_they_say_and_nothing_else() -> None:
    assert Int(0, 3).take(3) == 3
    for bad in (4, -1, True, 1.0, "1", None):
        with pytest.raises(Malformed):
            Int(0, 3).take(bad)
    assert Real(0, 2).take(1) == 1.0 and isinstance(Real(0, 2).take(1), float)
    for bad in (math.inf, math.nan, 3.0, False, "1.0", 10**400, -(10**400)):
        with pytest.raises(Malformed):
            Real(0, 2).take(bad)
    assert ListOf(Text(2), 2).take(["a", "bb"]) == ("a", "bb")
    for bad in (["a", "b", "c"], ["abc"], "ab", [1]):
        with pytest.raises(Malformed):
            ListOf(Text(2), 2).take(bad)
    assert Row((Int(0, 1), Text(1))).take([1, "x"]) == (1, "x")
    with pytest.raises(Malformed, match="no field 'a'"):
        fields({}, {"a": Int(0, 1)})
    with pytest.raises(Malformed, match="not JSON"):
        loads(b"\xff\xfe")


# ---- compiled checkers: the same verdict and the same values as fields(), whatever the object -----------------------
SPECS: dict[str, tuple[dict[str, Spec], dict[str, Spec]]] = {
    **{f"event {cls.__name__}": schema for cls, schema in wire._SCHEMAS.items()},
    **{f"pods control {kind}": schema for kind, schema in messages.FROM_COORDINATOR.items()},
    "nested": (
        {"a": Maybe(ListOf(Real(0, 1), 3)), "b": ListOf(Row((Int(0, 3), Maybe(Real(-1, 1)))), 2)},
        {"c": ListOf(ListOf(Int(0, 9), 2), 2), "d": ListOf(Maybe(Text(2)), 3), "e": Row((Bool(), ListOf(Text(1), 2)))},
    ),
}


def _canon(got: dict[str, object] | None) -> str:
    """A dict as text, keys in order, every value's type showing (1 is not 1.0, a tuple not a list)."""
    return "refused" if got is None else repr(sorted(got.items()))


def _reference(
    obj: dict[str, object], required: dict[str, Spec], optional: dict[str, Spec]
) -> dict[str, object] | None:
    try:
        return fields(obj, required, optional)
    except Malformed:
        return None


@pytest.mark.parametrize("name", sorted(SPECS))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_compiled_check_takes_what_fields_takes_and_gives_the_same(name: str, data: st.DataObject) -> None:
    required, optional = SPECS[name]
    obj = data.draw(fields_of(required, optional))
    names = sorted({*required, *optional})
    change = data.draw(st.sampled_from(["none", "one field", "drop", "add"]))
    if change == "one field" and names:
        target = data.draw(st.sampled_from(names))
        obj[target] = data.draw(near({**required, **optional}[target]))
    elif change == "drop" and obj:
        obj.pop(data.draw(st.sampled_from(sorted(obj))))
    elif change == "add":
        obj[data.draw(st.text(max_size=6))] = data.draw(ODD)
    check = compiled(required, optional)
    expected = _reference(obj, required, optional)
    assert _canon(check.fast(dict(obj))) == _canon(expected), check.source
    if expected is None:  # refused: check() says why, in fields()' words
        with pytest.raises(Malformed) as refused:
            check.check(dict(obj))
        with pytest.raises(Malformed) as said:
            fields(obj, required, optional)
        assert str(refused.value) == str(said.value)
    else:
        assert _canon(check.check(dict(obj))) == _canon(expected)


def test_a_compiled_check_fills_in_the_defaults_and_refuses_what_is_not_there() -> None:
    check = compiled({"a": Int(0, 3)}, {"b": Text(2), "c": ListOf(Real(0, 1), 2)}, {"b": "", "c": ()})
    assert check.check({"a": 1}) == {"a": 1, "b": "", "c": ()}
    assert check.check({"a": 1, "c": [1, 0.5]}) == {"a": 1, "b": "", "c": (1.0, 0.5)}
    for bad, why in [({}, "no field 'a'"), ({"a": 1, "d": 0}, "unknown field 'd'"), ({"a": 1, "c": [True]}, "'c'")]:
        with pytest.raises(Malformed, match=why):
            check.check(bad)
    assert compiled({}).check({}) == {}
