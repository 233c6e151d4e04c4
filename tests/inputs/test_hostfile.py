"""Hostfile and filter semantics: every case of DeepSpeed's tests/unit/launcher/test_run.py, plus fixes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.inputs.hostfile import FilterError, HostfileError, exclude, include, parse_filter, parse_hostfile, select


def pool(**hosts: int) -> dict[str, tuple[str, ...]]:
    return {h.replace("_", "-"): tuple(str(i) for i in range(n)) for h, n in hosts.items()}


def slots(*ids: int) -> tuple[str, ...]:
    return tuple(str(i) for i in ids)


ONE = pool(worker_0=4)
TWO = pool(worker_0=4, worker_1=4)


@pytest.mark.parametrize(
    ("how", "spec", "expected"),
    [
        ("exclude", "worker-0:1", {"worker-0": slots(0, 2, 3)}),
        ("exclude", "worker-0:1,2", {"worker-0": slots(0, 3)}),
        ("include", "worker-0:1", {"worker-0": slots(1)}),
        ("include", "worker-0:1,1", {"worker-0": slots(1)}),
        ("include", "worker-0:1@worker-0:0,1", {"worker-0": ("1", "0")}),  # the order given, once each
        ("include", "worker-0:3,1", {"worker-0": ("3", "1")}),  # docs/migration.md: 3,1 stays 3,1
        ("include", "worker-0", ONE),
        ("exclude", "worker-0", {}),
        ("exclude", "worker-0:0,1,2,3", {}),
    ],
)
def test_single_node_filters(how: str, spec: str, expected: dict[str, tuple[str, ...]]) -> None:
    """DeepSpeed test_parser_local."""
    assert (include if how == "include" else exclude)(ONE, spec) == expected


@pytest.mark.parametrize(
    ("how", "spec", "expected"),
    [
        ("include", "worker-1:0,3", {"worker-1": slots(0, 3)}),
        ("exclude", "worker-1", {"worker-0": slots(0, 1, 2, 3)}),
        ("exclude", "worker-0:0,1@worker-1:3", {"worker-0": slots(2, 3), "worker-1": slots(0, 1, 2)}),
        ("include", "worker-0@worker-1:0,2", {"worker-0": slots(0, 1, 2, 3), "worker-1": slots(0, 2)}),
        ("include", "worker-0", {"worker-0": slots(0, 1, 2, 3)}),
        ("exclude", "worker-0:1", {"worker-0": slots(0, 2, 3), "worker-1": slots(0, 1, 2, 3)}),
        # output follows the pool's order, not the filter's
        ("include", "worker-1@worker-0:2", {"worker-0": slots(2), "worker-1": slots(0, 1, 2, 3)}),
    ],
)
def test_multi_node_filters(how: str, spec: str, expected: dict[str, tuple[str, ...]]) -> None:
    """DeepSpeed test_parser_multinode and test_parse_inclusion_exclusion."""
    result = (include if how == "include" else exclude)(TWO, spec)
    assert result == expected
    assert list(result) == list(expected)


def test_no_filter_keeps_everything() -> None:
    assert select(TWO) == TWO


@pytest.mark.parametrize("spec", ["worker-0:4", "worker-0:99", "worker-0:0,4", "jeff"])
@pytest.mark.parametrize("how", [include, exclude])
def test_unknown_hosts_and_slots_rejected(how, spec: str) -> None:  # type: ignore[no-untyped-def]
    """DeepSpeed test_parse_inclusion_exclusion_errors: out-of-range slots fail for both."""
    with pytest.raises(FilterError):
        how(ONE, spec)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"include_spec": "jeff"}, "host 'jeff' is not in the hostfile; known hosts: worker-0, worker-1"),
        ({"exclude_spec": "jeff"}, "known hosts"),
        ({"include_spec": "worker-1:4"}, "no slot '4' on host 'worker-1'; its slots are: 0,1,2,3"),
        ({"exclude_spec": "worker-1:4"}, "no slot '4'"),
        ({"exclude_spec": "worker-1@worker-0:1@5"}, "host '5'"),
        ({"include_spec": "A", "exclude_spec": "B"}, "mutually exclusive"),
        ({"include_spec": "worker-0", "num_nodes": 1}, "cannot be combined"),
        ({"include_spec": "worker-0", "num_slots": 1}, "cannot be combined"),
        ({"exclude_spec": "worker-0", "num_nodes": 1, "num_slots": 1}, "cannot be combined"),
        ({"num_nodes": 3}, "more nodes than available"),
        ({"num_slots": 5}, "more than the slots of: worker-0 \\(4\\), worker-1 \\(4\\)"),
    ],
)
def test_select_errors_name_the_problem(kwargs: dict, match: str) -> None:  # type: ignore[type-arg]
    """DeepSpeed test_parser_errors and test_num_plus_parser, with messages that say what is valid."""
    with pytest.raises(FilterError, match=match):
        select(TWO, **kwargs)


@pytest.mark.parametrize("spec", ["w:", "w:1:2", "w@", "@w", "", "w:1,,2", " w", "w :1"])
def test_malformed_filters_name_the_token(spec: str) -> None:
    with pytest.raises(FilterError, match="bad"):
        parse_filter(spec)


def test_num_nodes_and_slots_take_the_first() -> None:
    assert select(TWO, num_nodes=1) == {"worker-0": slots(0, 1, 2, 3)}
    assert select(TWO, num_slots=2) == {"worker-0": slots(0, 1), "worker-1": slots(0, 1)}


def test_slot_labels_are_opaque_and_keep_their_order() -> None:
    """CUDA_VISIBLE_DEVICES=3,1 stays 3,1: labels are never sorted or renumbered (DeepSpeed #5818)."""
    visible = {"localhost": ("3", "1")}
    assert include(visible, "localhost:1") == {"localhost": ("1",)}
    assert select(visible, num_slots=1) == {"localhost": ("3",)}
    assert exclude(visible, "localhost:3") == {"localhost": ("1",)}


GOOD = """
    worker-1 slots=2
    worker-2 slots=2

    localhost slots=1
    123.23.12.10 slots=2

    #worker-1 slots=3
    # this is a comment

    """


def test_hostfile_good() -> None:
    """DeepSpeed test_hostfile_good."""
    result = parse_hostfile(GOOD)
    assert {h: len(s) for h, s in result.items()} == {"worker-1": 2, "worker-2": 2, "localhost": 1, "123.23.12.10": 2}
    assert list(result) == ["worker-1", "worker-2", "localhost", "123.23.12.10"]


def test_hostfile_extras() -> None:
    text = "a\tslots=3\nb slots=2 # trailing comment\nc slots=1 max_slots=8\nuser@d slots=1\n"
    assert parse_hostfile(text) == {"a": slots(0, 1, 2), "b": slots(0, 1), "c": slots(0), "user@d": slots(0)}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "worker-1 slots=2\nworker-2 slots=1\nworker-1 slots=1\n",
            r"hosts:3 'worker-1 slots=1': host 'worker-1' is listed more than once",
        ),
        ("this is bad slots=1\n", r"hosts:1 'this is bad slots=1': expected '<host> slots=<n>'"),
        ("missingslots\n", r"hosts:1 'missingslots'"),
        ("\n   \n", r"no hosts"),
        ("# only\n#comments\n", r"no hosts"),
        ("worker-1 slots=2\nthis is bad slots=1\nworker-2 slots=4\nmissingslots\n", r"hosts:2 "),
        ("w1 slots = 4\n", r"hosts:1"),
        ("w1 slots=4abc\n", r"whole number"),
        ("w1 slots=-1\n", r"hosts:1"),
    ],
)
def test_hostfile_bad_names_file_line_and_text(text: str, match: str) -> None:
    """DeepSpeed test_hostfiles_bad, plus: every error names file, line number and text."""
    with pytest.raises(HostfileError, match=match):
        parse_hostfile(text, "hosts")


@given(st.text(max_size=200))
def test_hostfile_parser_never_crashes(text: str) -> None:
    """Any text is either a pool of hosts with slot labels, or a HostfileError."""
    try:
        result = parse_hostfile(text)
    except HostfileError as exc:
        assert str(exc).startswith("hostfile ")
    else:
        assert result and all(isinstance(s, tuple) for s in result.values())


@given(st.text(alphabet="ab01:,@ -", max_size=30), st.sampled_from(["include", "exclude"]))
def test_filter_never_crashes(spec: str, how: str) -> None:
    """Any filter string either selects known slots or raises FilterError (never another exception)."""
    pool_ = {"a": ("0", "1"), "b": ("0", "1")}
    try:
        result = select(
            pool_, include_spec=spec if how == "include" else "", exclude_spec=spec if how == "exclude" else ""
        )
    except FilterError:
        return
    for host, labels in result.items():
        assert set(labels) <= set(pool_[host])
