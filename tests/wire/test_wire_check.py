"""The specs every wire message's fields are checked with (dslaunch/wire_check.py): each takes what it says and
nothing else; events are checked with them in tests/wire/test_decoder.py."""

from __future__ import annotations

import math

import pytest

from dslaunch.wire_check import Int, ListOf, Malformed, Real, Row, Text, fields, loads


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
