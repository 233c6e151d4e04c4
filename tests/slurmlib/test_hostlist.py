"""Hostlist expansion: Slurm's own rules, checked against a table and against scontrol."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.slurmlib.hostlist import HostlistError, expand, first

CASES = [
    ("n1", ("n1",)),
    ("n[1-2]", ("n1", "n2")),
    ("gpu[01-03,7],login1", ("gpu01", "gpu02", "gpu03", "gpu7", "login1")),
    ("a[8-11]", ("a8", "a9", "a10", "a11")),
    ("a[08-11]", ("a08", "a09", "a10", "a11")),
    ("node-[009-011]", ("node-009", "node-010", "node-011")),
    ("rack[1-2]-n[1-2]", ("rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")),
    ("a,b c", ("a", "b", "c")),
    ("a[1-2],a1", ("a1", "a2", "a1")),
    ("x[3]", ("x3",)),
]


@pytest.mark.parametrize(("expr", "hosts"), CASES)
def test_expand_table(expr: str, hosts: tuple[str, ...]) -> None:
    assert expand(expr) == hosts
    assert first(expr) == hosts[0]


@pytest.mark.parametrize("bad", ["n[1-2", "n1-2]", "n[a-b]", "n[3-1]", "n[1-]", "n[[1]]", "", "n[1-99999999]"])
def test_bad_hostlists_are_refused(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad) if bad else first(bad)


_ranges = st.lists(
    st.tuples(st.integers(0, 120), st.integers(0, 5), st.booleans()).map(
        lambda t: (f"{t[0]:03d}" if t[2] else str(t[0])) + (f"-{t[0] + t[1]}" if t[1] else "")
    ),
    min_size=1,
    max_size=4,
)
_names = st.tuples(st.sampled_from(["n", "gpu", "rack-a"]), _ranges).map(lambda t: f"{t[0]}[{','.join(t[1])}]")


@pytest.mark.launch
@pytest.mark.cluster
@settings(max_examples=25, deadline=None)
@given(st.lists(_names | st.sampled_from(["login1", "cpu", "x-y"]), min_size=1, max_size=3))
def test_expand_matches_scontrol(slurm_env: dict[str, str], names: list[str]) -> None:
    expr = ",".join(names)
    res = subprocess.run(
        ["scontrol", "show", "hostnames", expr], capture_output=True, text=True, timeout=10, env=slurm_env, check=True
    )
    assert expand(expr) == tuple(res.stdout.split())


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("n[1-60000][1-60000]", "expands to more than 1000000 hosts"),  # refused before the cross product
        ("n[1-1000000]", "more than 65536 hosts"),  # Slurm's own limit on one range
    ],
)
def test_huge_hostlists_are_refused_before_they_are_built(expr: str, needle: str) -> None:
    with pytest.raises(HostlistError, match=needle):
        expand(expr)
    assert len(expand("n[1-65536]")) == 65536
