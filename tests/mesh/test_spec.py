"""Pure spec parsing, -1 inference and validation messages (no torch, no process group)."""

from __future__ import annotations

import pytest

from dslaunch.mesh import MeshConfigError, MeshSpec, locality_warnings, parse_spec, resolve, spec_from_config


@pytest.mark.parametrize(
    ("text", "world", "expected"),
    [
        ("", 8, {"dp_shard": 8}),
        ("tp=2", 8, {"dp_shard": 4, "tp": 2}),
        ("pp=2,dp=-1,tp=2", 8, {"pp": 2, "dp_shard": 2, "tp": 2}),
        (" pp = 2 ; dp = -1 ; tp = 2 ", 8, {"pp": 2, "dp_shard": 2, "tp": 2}),
        ("dp_replicate=2", 8, {"dp_replicate": 2, "dp_shard": 4}),
        ("dp=4,dp_replicate=2", 4, {"dp_replicate": 2, "dp_shard": 2}),
        ("dp=-1,dp_replicate=2,tp=2", 8, {"dp_replicate": 2, "dp_shard": 2, "tp": 2}),
        ("tp=-1,dp=2", 8, {"dp_shard": 2, "tp": 4}),
        ("pp=-1,tp=2", 8, {"pp": 4, "tp": 2}),
        ("tp=-1", 8, {"tp": 8}),
        ("dp_replicate=2,cp=2,tp=2", 16, {"dp_replicate": 2, "dp_shard": 2, "cp": 2, "tp": 2}),
        ("tp=4", 12, {"dp_shard": 3, "tp": 4}),
        ("sp=2", 8, {"dp_shard": 4, "sp": 2}),
        ("dp=4,ep=2", 4, {"dp_shard": 4, "ep": 2}),
        ("dp_replicate=2,tp=2,ep=4", 16, {"dp_replicate": 2, "dp_shard": 4, "tp": 2, "ep": 4}),
        ("", 1, {"dp_shard": 1}),
    ],
)
def test_resolve(text: str, world: int, expected: dict[str, int]) -> None:
    layout = resolve(parse_spec(text), world)
    full = {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 1, "sp": 1, "tp": 1, "ep": 1, **expected}
    assert {n: getattr(layout, n) for n in full} == full


@pytest.mark.parametrize(
    ("text", "world", "message"),
    [
        ("pp=2,dp=3,tp=2", 8, "mesh: pp(2) * dp(3) * tp(2) = 12 != WORLD_SIZE(8)"),
        ("pp=2,dp_replicate=2,dp_shard=3", 8, "pp(2) * dp_replicate(2) * dp_shard(3) = 12 != WORLD_SIZE(8)"),
        ("dp=1", 8, "mesh: 1 = 1 != WORLD_SIZE(8)"),
        ("tp=4", 10, "cannot infer dp_shard: WORLD_SIZE(10) is not divisible by tp(4) = 4"),
        ("dp_replicate=2,tp=4,pp=2", 24, "WORLD_SIZE(24) is not divisible by pp(2) * dp_replicate(2) * tp(4) = 16"),
        ("dp_replicate=8", 4, "cannot infer dp_shard: WORLD_SIZE(4) is not divisible by dp_replicate(8) = 8"),
        ("tp=0", 8, "mesh: tp must be a positive whole number or -1 (got 0)"),
        ("pp=-2", 8, "mesh: pp must be a positive whole number or -1 (got -2)"),
        ("ep=-1", 8, "mesh: ep must be a positive whole number (got -1)"),
        ("dp=-1,tp=-1", 8, "only one dim may be -1 (got dp_shard=-1, tp=-1)"),
        ("cp=2,sp=2", 8, "cp and sp cannot both be > 1 (cp=2, sp=2)"),
        ("dp=2,tp=2,ep=3", 4, "mesh: ep(3) * etp(2, = tp by default) = 6 must divide dp(2) * tp(2) = 4"),
        ("dp=2,tp=2,ep=3,etp=1", 4, "mesh: ep(3) * etp(1) = 3 must divide dp(2) * tp(2) = 4 (the ranks of one"),
        ("dp=4,ep=2,etp=4", 4, "mesh: ep(2) * etp(4) = 8 must divide dp(4) = 4"),
        ("etp=0", 8, "mesh: etp must be a positive whole number (got 0)"),
        ("xp=2", 8, "unknown dim 'xp'; valid dims: pp, dp_replicate, dp_shard (alias dp), cp, sp, tp, ep, etp"),
        ("tp", 8, "'tp' needs a size, like tp=2"),
        ("tp=two", 8, "tp='two' is not a whole number"),
        ("tp=2,tp=4", 8, "tp is given twice"),
        ("dp=2,dp_shard=2", 8, "give dp or dp_shard, not both"),
        ("dp=6,dp_replicate=4", 24, "dp(6) is not divisible by dp_replicate(4)"),
    ],
)
def test_errors_spell_out_every_factor(text: str, world: int, message: str) -> None:
    with pytest.raises(MeshConfigError) as err:
        resolve(parse_spec(text), world)
    assert message in str(err.value)


def test_spec_text_is_canonical() -> None:
    assert parse_spec("tp=2,pp=2").text() == parse_spec("pp=2, tp=2").text()
    assert parse_spec("tp=2").text() != parse_spec("tp=4").text()
    assert parse_spec("").text() == MeshSpec().text()


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({}, None),
        ({"train_batch_size": 8}, None),
        ({"mesh": {"tp": 2, "dp": -1}}, MeshSpec(tp=2)),
        ({"mesh": "pp=2,tp=2"}, MeshSpec(pp=2, tp=2)),
        ({"mesh_param": [2, 4]}, MeshSpec(dp_shard=2, sp=4)),
        ({"data_parallel_size": 2, "sequence_parallel_size": 4}, MeshSpec(dp_shard=2, sp=4)),
        ({"sequence_parallel_size": 2}, MeshSpec(sp=2)),
        ({"tensor_parallel": {"autotp_size": 4}}, MeshSpec(tp=4)),
        ({"mesh": {"tp": 2}, "data_parallel_size": 7}, MeshSpec(tp=2)),
    ],
)
def test_config_keys_map_in(config: dict, expected: MeshSpec | None) -> None:
    assert spec_from_config(config) == expected


@pytest.mark.parametrize(
    "config",
    [{"mesh": 3}, {"mesh_param": [2]}, {"mesh": {"tp": True}}, {"mesh": {"tp": 2.5}}, {"mesh": {"model": 2}}],
)
def test_bad_config_sections(config: dict) -> None:
    with pytest.raises(MeshConfigError, match="mesh"):
        spec_from_config(config)


@pytest.mark.parametrize(
    ("text", "world", "local", "warned"),
    [
        ("tp=4", 16, 8, False),
        ("tp=16", 32, 8, True),
        ("tp=3", 12, 8, True),
        ("tp=16", 16, 16, False),  # a single node: nothing crosses nodes
        ("tp=2,cp=8", 32, 8, True),
        ("dp=-1", 64, 8, False),
    ],
)
def test_locality_warning(text: str, world: int, local: int, warned: bool) -> None:
    warnings = locality_warnings(resolve(parse_spec(text), world), local)
    assert bool(warnings) == warned, warnings
    if warned:
        assert f"the {local} ranks per node" in warnings[0]
