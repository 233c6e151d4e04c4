"""The console collapse's pure core (output/collapse.py) and its two shells, driven in-process with times as numbers.

Each row: lines fed as (time, rank, text) and ticks as (time, None, None); what prints, in order. A line that
prints at once is written ``rank:text``; a closed window's line ``[ranks]:text``.
"""

from __future__ import annotations

import os

import pytest

from dslaunch import wire
from dslaunch.output.collapse import DEFAULT, Collapsed, Collapser, Limits, agent_collapses, prefix_of, rank_ranges
from dslaunch.output.collapse_agent import SinkCollapse
from dslaunch.output.collapse_launcher import LineCollapse, without_flush_lines
from dslaunch.output.sink import Sink
from dslaunch.plan import LaunchPlan, NodePlan, Program
from tests.plans import plan_of

Step = tuple[float, int | None, str | None]  # (time, rank, text); rank None: a tick (a flush at time -1)


def run(steps: list[Step], limits: Limits = DEFAULT) -> list[str]:
    core: Collapser[str] = Collapser(limits)
    printed: list[str] = []
    closed: list[Collapsed[str]] = []

    def take() -> None:
        printed.extend(f"[{rank_ranges(c.ranks)}]:{c.text}" for c in closed)
        closed.clear()

    for now, rank, text in steps:
        if rank is None and now < 0:
            core.flush(closed)
        elif rank is None:
            core.tick(now, closed)
        take()
        if rank is not None and text is not None and core.add(rank, "h", text, now, closed):
            take()
            printed.append(f"{rank}:{text}")
        take()
    return printed


def tick(now: float) -> Step:
    return (now, None, None)


FLUSH: Step = (-1.0, None, None)
W = "UserWarning: x is deprecated"

CASES: dict[str, tuple[list[Step], list[str]]] = {
    "one rank's line prints at once, and nothing after": ([(0.0, 0, W), tick(5.0)], [f"0:{W}"]),
    "256 ranks, one warning: the first at once, the rest as one line when the window closes": (
        [(0.0, 0, W), *[(0.001 * r, r, W) for r in range(1, 256)], tick(0.999), tick(1.0)],
        [f"0:{W}", f"[1-255]:{W}"],
    ),
    "differing texts are never merged": (
        [(0.0, r, f"loss {r}") for r in range(4)] + [tick(2.0)],
        [f"{r}:loss {r}" for r in range(4)],
    ),
    "trailing whitespace makes a different text": (
        [(0.0, 0, "x"), (0.0, 1, "x "), (0.0, 2, "x"), tick(2.0)],
        ["0:x", "1:x ", "[2]:x"],
    ),
    "after the window the same text prints at once again": (
        [(0.0, 0, W), (0.5, 1, W), (1.0, 2, W), tick(3.0)],
        [f"0:{W}", f"[1]:{W}", f"2:{W}"],
    ),
    "a rank that repeats its line closes the window first: no line of it is counted away": (
        [(0.0, 0, "."), (0.1, 1, "."), (0.2, 0, "."), (0.3, 0, "."), tick(3.0)],
        ["0:.", "[1]:.", "0:.", "0:."],
    ),
    "a held rank that repeats its line: the window closes, its new line prints": (
        [(0.0, 0, "."), (0.1, 1, "."), (0.2, 1, "."), tick(3.0)],
        ["0:.", "[1]:.", "1:."],
    ),
    "windows close in the order they opened": (
        [(0.0, 0, "a"), (0.1, 0, "b"), (0.2, 1, "b"), (0.3, 1, "a"), tick(2.0)],
        ["0:a", "0:b", "[1]:a", "[1]:b"],
    ),
    "a flush (a failed rank, the end) closes every window at once": (
        [(0.0, 0, "a"), (0.0, 1, "a"), (0.0, 2, "a"), (0.0, 5, "b"), (0.0, 7, "b"), FLUSH, (0.1, 3, "a")],
        ["0:a", "5:b", "[1-2]:a", "[7]:b", "3:a"],
    ),
}


@pytest.mark.parametrize(("steps", "printed"), list(CASES.values()), ids=list(CASES))
def test_collapse(steps: list[Step], printed: list[str]) -> None:
    assert run(steps) == printed


CAPS: dict[str, tuple[Limits, list[Step], list[str]]] = {
    "past the key bound the oldest texts are forgotten: a copy of one prints at once": (
        Limits(keys=4),  # two generations of 2
        [*[(0.0, 0, t) for t in "abcde"], (0.0, 1, "a"), (0.0, 1, "d"), tick(2.0)],
        ["0:a", "0:b", "0:c", "0:d", "0:e", "1:a", "[1]:d"],
    ),
    "a text longer than half the byte bound is never remembered": (
        Limits(text_bytes=10),
        [(0.0, 0, "aaaa"), (0.0, 1, "aaaa"), (0.0, 0, "bbbbbbb"), (0.0, 1, "bbbbbbb"), tick(2.0)],
        ["0:aaaa", "0:bbbbbbb", "1:bbbbbbb", "[1]:aaaa"],
    ),
    "past the byte bound of held texts the oldest window closes early, before the line that passed it": (
        Limits(text_bytes=10),
        [*[(0.0, rank, t) for t in ("aaaa", "bbbb", "cccc") for rank in (0, 1)], (0.0, 0, "dd"), tick(2.0)],
        ["0:aaaa", "0:bbbb", "0:cccc", "[1]:aaaa", "0:dd", "[1]:bbbb", "[1]:cccc"],
    ),
    "past the held bound the oldest holding window closes early, with the copy that passed it": (
        Limits(held=2),
        [(0.0, 0, "a"), (0.0, 1, "a"), (0.0, 2, "a"), (0.0, 3, "a"), (0.0, 4, "a"), tick(2.0)],
        ["0:a", "[1-3]:a", "4:a"],
    ),
    "a longer window holds later copies": (
        Limits(window=5.0),
        [(0.0, 0, W), (4.9, 1, W), tick(4.99), tick(5.0)],
        [f"0:{W}", f"[1]:{W}"],
    ),
}


@pytest.mark.parametrize(("limits", "steps", "printed"), list(CAPS.values()), ids=list(CAPS))
def test_caps(limits: Limits, steps: list[Step], printed: list[str]) -> None:
    assert run(steps, limits) == printed


def test_memory_stays_bounded_under_a_flood_of_texts_and_of_windows() -> None:
    core: Collapser[str] = Collapser(Limits(keys=8))
    closed: list[Collapsed[str]] = []
    for i in range(10_000):  # distinct texts: at most `keys` remembered
        assert core.add(0, "h", f"line {i}", 0.0, closed)
    assert len(core._seen) + len(core._older) <= 8
    for i in range(10_000):  # two ranks alternating one text: every other line opens and closes a window
        core.add(i % 2, "h", "x", 1.0 + i * 1e-6, closed)
    assert len(core._open) <= 1 and len(core._due) <= 2 * 1 + 64 + 1
    assert sum(len(c.ranks) for c in closed) == 4999


@pytest.mark.parametrize(
    ("ranks", "texts", "taken"),
    [
        (0, ["a", "b", "a"], True),  # one rank's lines: its own repeats print anyway
        ([0, 1, 2], ["a", "b", "c"], True),
        ([0, 1, 2], ["a", "b", "a"], False),  # two ranks' copies inside the batch: one by one
        (0, ["known"], False),  # a text printed lately: one by one
        (0, [], True),
    ],
)
def test_a_batch_of_unknown_texts_is_taken_whole_and_remembered(
    ranks: int | list[int], texts: list[str], taken: bool
) -> None:
    core: Collapser[str] = Collapser()
    closed: list[Collapsed[str]] = []
    core.add(9, "h", "known", 0.0, closed)
    assert core.add_unknown(ranks, texts, 0.1) is taken
    if taken and texts:  # remembered: another rank's copy is held
        assert not core.add(7, "h", texts[-1], 0.2, closed)
        core.flush(closed)
        assert [c.ranks for c in closed] == [(7,)]


def test_next_due_is_the_oldest_holding_window_and_none_without_one() -> None:
    core: Collapser[str] = Collapser()
    closed: list[Collapsed[str]] = []
    core.add(0, "h", "a", 0.0, closed)
    assert core.next_due() is None  # nothing held: no reason to wake up
    core.add(0, "h", "b", 0.3, closed)
    core.add(1, "h", "b", 0.4, closed)
    core.add(1, "h", "a", 0.5, closed)
    assert core.next_due() == 1.0
    core.tick(1.0, closed)
    assert [c.text for c in closed] == ["a"] and core.next_due() == 1.3


@pytest.mark.parametrize(
    ("ranks", "text"),
    [
        ([5], "5"),
        ([1, 2], "1-2"),
        ([1, 3], "1,3"),
        ([*range(256), *range(257, 1024)], "0-255,257-1023"),
        ([0, 2, 3, 4, 9], "0,2-4,9"),
    ],
)
def test_rank_ranges(ranks: list[int], text: str) -> None:
    assert rank_ranges(ranks) == text


@pytest.mark.parametrize(
    ("hosts", "with_host", "prefix"),
    [
        (("n1",), True, "[n1:rank1-3]: "),
        (("n1", "n2"), True, "[rank1-3]: "),  # across hosts the ranks say it all
        (("n1",), False, "[rank1-3]: "),  # a one-node plan has no host in its prefixes
    ],
)
def test_prefix(hosts: tuple[str, ...], with_host: bool, prefix: str) -> None:
    assert prefix_of(Collapsed((1, 2, 3), hosts, "t"), with_host) == prefix


@pytest.mark.parametrize(
    ("forked", "both"),
    [
        (True, (True, True)),  # local, --node-rank, Slurm: writes both to the console itself
        (False, (False, False)),  # ssh, pdsh, mpirun: both pass the launcher, which collapses over every node
    ],
)
def test_who_collapses_where(forked: bool, both: tuple[bool, bool]) -> None:
    assert agent_collapses(forked) == both


def _plan(hosts: list[str], per_node: int) -> LaunchPlan:
    nodes = tuple(
        NodePlan(h, i, tuple(str(s) for s in range(per_node)), tuple(range(i * per_node, (i + 1) * per_node)))
        for i, h in enumerate(hosts)
    )
    return LaunchPlan("ssh", "t", nodes, hosts[0], 29500, Program("x.py"))


def test_the_launcher_collapses_across_hosts_and_passes_other_lines_untouched() -> None:
    c = LineCollapse(_plan(["a", "b"], 2))
    assert c.feed("[a:rank0]: W\n[a:rank1]: W\n", 0.0) == "[a:rank0]: W\n"
    assert c.feed("[b:rank2]: W\n[b:rank3]: other\n[b:rank9]: W\nplain W\n", 0.1) == (
        "[b:rank3]: other\n[b:rank9]: W\nplain W\n"  # rank 9 is no rank of the plan
    )
    assert c.due(0.5) == ""
    assert c.due(1.0) == "[rank1-2]: W\n"
    assert c.feed("[a:rank0]: W\n[a:rank1]: W\n", 2.0) == "[a:rank0]: W\n"
    assert c.flush() == "[a:rank1]: W\n"  # one host: its name stays


def test_a_line_fed_after_the_last_flush_passes_as_it_is_never_held() -> None:
    """A stderr reader that took the collapse just before the attempt's console closed: its lines must show."""
    c = LineCollapse(_plan(["a", "b"], 2))
    assert c.feed("[a:rank0]: W\n[b:rank2]: W\n", 0.0) == "[a:rank0]: W\n"
    assert c.flush(last=True) == "[b:rank2]: W\n"
    assert c.feed(f"[a:rank1]: W\n{wire.FLUSH_LINE}\n[b:rank3]: W\n", 0.1) == "[a:rank1]: W\n[b:rank3]: W\n"
    assert c.due(5.0) == "" and c.flush() == ""


def test_an_agents_flush_line_prints_what_is_held_in_its_place_and_never_shows() -> None:
    c = LineCollapse(_plan(["a", "b"], 2))
    assert c.feed("[a:rank0]: W\n[b:rank2]: W\n", 0.0) == "[a:rank0]: W\n"
    flushed = f"[b:rank3]: W\n{wire.FLUSH_LINE}\n[b:rank3]: stopping\n"
    assert c.feed(flushed, 0.1) == "[b:rank2-3]: W\n[b:rank3]: stopping\n"  # before the lines after it
    assert c.feed(f"{wire.FLUSH_LINE}\n", 0.2) == ""
    assert c.due(5.0) == ""
    assert without_flush_lines(f"x\n{wire.FLUSH_LINE}\n[a:rank0]: {wire.FLUSH_LINE}\n") == (
        f"x\n[a:rank0]: {wire.FLUSH_LINE}\n"  # a rank's own line that says the same stays
    )


def test_the_agent_shell_holds_copies_and_writes_the_window_line_into_the_sink() -> None:
    r, w = os.pipe()
    sink = Sink(w)
    sink.start()
    held = SinkCollapse(sink, "h", with_host=False)
    for rank in range(4):
        prefix = b"[rank%d]: " % rank
        held.put(rank, rank, prefix, [prefix, b"W\n" + prefix + b"mine %d\n" % rank], None, now=0.0)
    held.put("bar", 0, b"[rank0]: ", [b"\r[rank0]: W\n"], None, now=0.0)  # a live bar's end passes untouched
    held.tick(0.5)
    held.tick(1.0)
    sink.wait_idle(None)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        lines = f.read().decode().split("\n")[:-1]
    assert lines == [
        "[rank0]: W",
        "[rank0]: mine 0",
        "[rank1]: mine 1",
        "[rank2]: mine 2",
        "[rank3]: mine 3",
        "\r[rank0]: W",
        "[rank1-3]: W",
    ]


@pytest.mark.parametrize(
    ("args", "env", "on"),
    [
        ([], {}, True),
        (["--no-collapse-output"], {}, False),
        ([], {"DSLAUNCH_COLLAPSE_OUTPUT": "0"}, False),
        (["--collapse-output"], {"DSLAUNCH_COLLAPSE_OUTPUT": "0"}, True),  # the command line wins
    ],
)
def test_the_switch_reaches_the_plan(args: list[str], env: dict[str, str | None], on: bool) -> None:
    plan = plan_of([*args, "--dry-run", "x.py"], env={"DSLAUNCH_COLLAPSE_OUTPUT": None, **env})
    assert plan.collapse_output is on
    assert ("DSLAUNCH_COLLAPSE_OUTPUT", "0") in plan.env or on  # what the agents read, in the plan
