"""Rank -> coordinate and group membership against the worked examples and a numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.mesh import EXPERT_VIEWS, NAMES, ORDER, VIEWS, MeshSpec, parse_spec, resolve

# Worked examples E1-E9 of the reference notes (mesh.md §7), copied as literal lists.
EXAMPLES = {
    "E1": (
        "dp=2,tp=4",
        8,
        {
            "tp": [[0, 1, 2, 3], [4, 5, 6, 7]],
            "dp": [[0, 4], [1, 5], [2, 6], [3, 7]],
        },
    ),
    "E2": (
        "dp=4,sp=2",
        8,
        {
            "sp": [[0, 1], [2, 3], [4, 5], [6, 7]],
            "dp": [[0, 2, 4, 6], [1, 3, 5, 7]],
            "dp_sp": [[0, 1, 2, 3, 4, 5, 6, 7]],
        },
    ),
    "E3": (
        "pp=2,dp=2,tp=2",
        8,
        {
            "tp": [[0, 1], [2, 3], [4, 5], [6, 7]],
            "dp": [[0, 2], [1, 3], [4, 6], [5, 7]],
            "pp": [[0, 4], [1, 5], [2, 6], [3, 7]],
            "mp": [[0, 1, 4, 5], [2, 3, 6, 7]],
        },
    ),
    "E4": (
        "pp=4,dp=2,tp=2",
        16,
        {
            "tp": [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]],
            "dp": [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]],
            "pp": [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]],
        },
    ),
    "E5": (
        "dp_replicate=2,dp_shard=4",
        8,
        {
            "dp_shard": [[0, 1, 2, 3], [4, 5, 6, 7]],
            "dp_replicate": [[0, 4], [1, 5], [2, 6], [3, 7]],
            "dp": [[0, 1, 2, 3, 4, 5, 6, 7]],
        },
    ),
    "E6": (
        "dp_replicate=2,dp_shard=2,tp=4",
        16,
        {
            "tp": [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]],
            "dp_shard": [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]],
            "dp_replicate": [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]],
            "dp": [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]],
        },
    ),
    "E7": (
        "dp_replicate=2,dp_shard=2,cp=2,tp=2",
        16,
        {
            "tp": [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]],
            "cp": [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]],
            "dp_shard": [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]],
            "dp_replicate": [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]],
            "dp": [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]],
            "dp_shard_cp": [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]],
            "dp_cp": [[0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15]],
            "loss": [[0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15]],
            "batch": [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]],
        },
    ),
    "E8": (
        "pp=2,dp=2,sp=2,tp=2",
        16,
        {
            "tp": [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]],
            "sp": [[0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]],
            "dp": [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]],
            "pp": [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]],
            "dp_sp": [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]],
            "loss": [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]],
        },
    ),
    "E9": (
        "dp_replicate=2,dp_shard=4,tp=2,ep=4,etp=1",
        16,
        {
            "ep": [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]],
            "efsdp": [[0, 4], [1, 5], [2, 6], [3, 7], [8, 12], [9, 13], [10, 14], [11, 15]],
        },
    ),
    # Megatron's default etp = tp: megatron-core 0.16.1 initialize_model_parallel(2, 1, 1, 2) gives these.
    "E9-etp": (
        "dp=2,tp=2,ep=2",
        4,
        {
            "ep": [[0, 2], [1, 3]],
            "etp": [[0, 1], [2, 3]],
            "emp": [[0, 1, 2, 3]],
            "efsdp": [[0], [1], [2], [3]],
            "tp_dp": [[0, 1, 2, 3]],
        },
    ),
    "E9-ep1": (
        "dp=2,tp=2",
        4,
        {"ep": [[0], [1], [2], [3]], "etp": [[0, 1], [2, 3]], "emp": [[0, 1], [2, 3]], "efsdp": [[0, 2], [1, 3]]},
    ),
}


@pytest.mark.parametrize("example", sorted(EXAMPLES))
def test_worked_examples(example: str) -> None:
    text, world, expected = EXAMPLES[example]
    layout = resolve(parse_spec(text), world)
    for name, groups in expected.items():
        assert layout.groups(name) == groups, name
        for group in groups:
            for index, rank in enumerate(group):
                assert layout.local_rank(name, rank) == index


def test_example_coordinates() -> None:
    assert resolve(parse_spec("dp=2,tp=4"), 8).coordinate(5) == {**dict.fromkeys(ORDER, 0), "dp_shard": 1, "tp": 1}
    e7 = resolve(parse_spec("dp_replicate=2,dp_shard=2,cp=2,tp=2"), 16)
    assert [e7.coordinate(11)[n] for n in e7.active] == [1, 0, 1, 1]
    assert all(e7.rank_of(e7.coordinate(r)) == r for r in range(16))


def numpy_groups(sizes: dict[str, int], members: tuple[str, ...]) -> list[list[int]]:
    """Independent reference: reshape arange(W), move the group's axes last, read rows."""
    grid = np.arange(int(np.prod([sizes[n] for n in ORDER]))).reshape([sizes[n] for n in ORDER])
    axes = [ORDER.index(m) for m in members]
    rest = [i for i in range(len(ORDER)) if i not in axes]
    rows = np.transpose(grid, rest + axes).reshape(-1, int(np.prod([sizes[m] for m in members])))
    return sorted(row.tolist() for row in rows)


@settings(max_examples=150, deadline=None)
@given(
    pp=st.sampled_from([1, 2, 3]),
    rep=st.sampled_from([1, 2]),
    shard=st.sampled_from([1, 2, 4]),
    cs=st.sampled_from([(1, 1), (2, 1), (1, 2)]),
    tp=st.sampled_from([1, 2, 4]),
)
def test_groups_match_numpy_reference(pp: int, rep: int, shard: int, cs: tuple[int, int], tp: int) -> None:
    spec = MeshSpec(pp=pp, dp_replicate=rep, dp_shard=shard, cp=cs[0], sp=cs[1], tp=tp)
    world = pp * rep * shard * cs[0] * cs[1] * tp
    layout = resolve(spec, world)
    sizes = {n: getattr(layout, n) for n in ORDER}
    for name in NAMES:
        if name in EXPERT_VIEWS:
            continue
        members = (name,) if name in ORDER else VIEWS.get(name, ORDER)
        assert layout.groups(name) == numpy_groups(sizes, members), name
        assert layout.size(name) == len(layout.groups(name)[0])
    for rank in range(world):
        coord = layout.coordinate(rank)
        assert tuple(coord[n] for n in ORDER) == tuple(int(c) for c in np.unravel_index(rank, list(sizes.values())))


@settings(max_examples=60, deadline=None)
@given(
    pp=st.sampled_from([1, 2]),
    rep=st.sampled_from([1, 2]),
    shard=st.sampled_from([1, 2, 4]),
    tp=st.sampled_from([1, 2, 4]),
    ep=st.sampled_from([1, 2, 4]),
    etp=st.sampled_from([None, 1, 2]),
)
def test_expert_groups_match_numpy_reference(pp: int, rep: int, shard: int, tp: int, ep: int, etp: int | None) -> None:
    spec = MeshSpec(pp=pp, dp_replicate=rep, dp_shard=shard, tp=tp, ep=ep, etp=etp)
    world, dense, expert_tp = pp * rep * shard * tp, shard * tp, tp if etp is None else etp
    if dense % (ep * expert_tp):
        return
    layout = resolve(spec, world)
    # Each (pp, dp_replicate) block of `dense` ranks reshaped to (efsdp, ep, etp), etp fastest.
    grid = np.arange(world).reshape(pp * rep, dense // (ep * expert_tp), ep, expert_tp)
    for name, axes in {"efsdp": [1], "ep": [2], "etp": [3], "emp": [2, 3]}.items():
        rest = [a for a in range(4) if a not in axes]
        rows = np.transpose(grid, rest + axes).reshape(-1, int(np.prod([grid.shape[a] for a in axes])))
        assert layout.groups(name) == sorted(row.tolist() for row in rows), name


def test_size_answers_every_name() -> None:
    layout = resolve(parse_spec("pp=2,tp=2"), 8)
    assert {n: layout.size(n) for n in NAMES} == {
        "pp": 2,
        "dp_replicate": 1,
        "dp_shard": 2,
        "cp": 1,
        "sp": 1,
        "tp": 2,
        "dp": 2,
        "dp_cp": 2,
        "dp_sp": 2,
        "dp_shard_cp": 2,
        "mp": 4,
        "tp_dp": 4,
        "tp_dp_cp": 4,
        "batch": 2,
        "loss": 2,
        "ep": 1,
        "etp": 2,  # Megatron's default: etp = tp
        "emp": 2,
        "efsdp": 2,  # Megatron's expert data parallel: dense // (ep * etp)
        "world": 8,
    }
    with pytest.raises(ValueError, match="unknown dim or view 'model'; valid: pp, dp_replicate"):
        layout.size("model")


@pytest.mark.parametrize(
    ("text", "world", "views", "count"),
    [
        ("dp=-1", 8, (), 0),  # one world-wide dim reuses the default group
        ("dp=2,tp=4", 8, ("tp_dp",), 6),  # W/k per dim: 4 + 2; tp_dp spans the world; etp is tp, efsdp dp
        ("dp_replicate=2,dp_shard=4", 8, ("dp",), 6),  # dp spans the world: no new group
        ("pp=2,dp=2,tp=2", 8, ("mp", "tp_dp"), 12 + 2 + 2),
        (
            "dp_replicate=2,dp_shard=2,cp=2,tp=2",
            16,
            ("dp", "dp_cp", "dp_shard_cp", "tp_dp", "tp_dp_cp"),
            32 + 4 + 2 + 4 + 2 + 0,
        ),
        ("dp_replicate=2,sp=2", 8, ("dp", "dp_sp"), 4 + 4 + 4 + 2 + 0 + 2),  # + efsdp = dp_shard*sp
        ("tp=2", 2, (), 0),
        ("dp=2,tp=2,ep=2", 4, ("tp_dp",), 2 + 2 + 2 + 2),  # tp_dp unflattened to (ep, etp)
        ("dp=2,tp=2,ep=2,etp=1", 4, ("tp_dp",), 2 + 2 + 2 + 2),  # (efsdp, ep)
        ("dp=2,tp=2,etp=1", 4, ("tp_dp",), 2 + 2),  # efsdp is tp_dp itself
        ("pp=4,tp=2", 8, ("mp",), 2 + 4 + 0 + 2),  # + the embedding groups: first and last stage of each pp group
        ("pp=2,dp=2,tp=2,ep=2", 8, ("mp", "tp_dp"), 12 + 2 + 2 + 4 + 4),
    ],
)
def test_views_and_group_count(text: str, world: int, views: tuple[str, ...], count: int) -> None:
    layout = resolve(parse_spec(text), world)
    assert layout.built_views() == views
    assert layout.new_group_count() == count
