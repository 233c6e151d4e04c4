"""Back-compat getters' sizes, ranks and source ranks on every rank of the worked examples (pure: the
getters read a BuiltMesh built without torch; group objects are covered by the gloo tests)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dslaunch import compat
from dslaunch.bootstrap import engine as engine_module
from dslaunch.bootstrap.mesh_build import BuiltMesh
from dslaunch.compat import groups
from dslaunch.mesh import parse_spec, resolve


@pytest.fixture
def use_mesh(monkeypatch: pytest.MonkeyPatch):
    def use(text: str, world: int, rank: int) -> None:
        built = BuiltMesh(layout=resolve(parse_spec(text), world), rank=rank, root=None, meshes={})
        monkeypatch.setattr(engine_module, "_engine", SimpleNamespace(built_mesh=built))

    return use


def test_getters_need_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "_engine", None)
    assert not compat.is_initialized()
    with pytest.raises(RuntimeError, match=r"call dslaunch.engine\(\)"):
        compat.get_data_parallel_world_size()


def test_megatron_names_e7_with_context_parallel(use_mesh) -> None:
    # E7: (dp_replicate, dp_shard, cp, tp) = (2, 2, 2, 2); Megatron tp=2, cp=2, dp=4, 2 optimizer instances.
    for rank in range(16):
        use_mesh("dp_replicate=2,dp_shard=2,cp=2,tp=2", 16, rank)
        dp = next(g for g in ([0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]) if rank in g)
        dp_cp = next(g for g in (list(range(0, 16, 2)), list(range(1, 16, 2))) if rank in g)
        assert compat.get_data_parallel_world_size() == 4 and compat.get_data_parallel_rank() == dp.index(rank)
        assert compat.get_data_parallel_src_rank() == dp[0] and compat.get_data_parallel_group_ranks() == dp
        assert compat.get_data_parallel_world_size(with_context_parallel=True) == 8
        assert compat.get_data_parallel_rank(with_context_parallel=True) == dp_cp.index(rank)
        assert compat.get_data_parallel_src_rank(with_context_parallel=True) == dp_cp[0]
        assert compat.get_data_parallel_world_size(partial_data_parallel=True) == 4  # dp_shard_cp
        assert compat.get_context_parallel_world_size() == 2
        assert compat.get_context_parallel_global_ranks() == [
            rank - rank % 4 + rank % 2,
            rank - rank % 4 + rank % 2 + 2,
        ]
        assert compat.get_tensor_model_parallel_rank() == rank % 2
        assert compat.get_tensor_model_parallel_src_rank() == rank - rank % 2
        assert compat.get_model_parallel_world_size() == 2  # pp=1: mp is tp


def test_megatron_pipeline_e4(use_mesh) -> None:
    # E4, the Megatron docstring: tp=2, pp=4 on 16 ranks; pp groups [g, g+4, g+8, g+12].
    for rank in range(16):
        use_mesh("pp=4,dp=2,tp=2", 16, rank)
        stage, first = rank // 4, rank % 4
        assert compat.get_pipeline_model_parallel_rank() == stage
        assert compat.get_pipeline_model_parallel_first_rank() == first
        assert compat.get_pipeline_model_parallel_last_rank() == first + 12
        assert compat.get_pipeline_model_parallel_next_rank() == (rank + 4) % 16
        assert compat.get_pipeline_model_parallel_prev_rank() == (rank - 4) % 16
        assert compat.is_pipeline_first_stage() == (stage == 0)
        assert compat.is_pipeline_last_stage() == (stage == 3)
        assert compat.get_model_parallel_world_size() == 8  # pp * tp
        assert compat.get_model_parallel_src_rank() == rank // 2 % 2 * 2  # mp = all ranks with its dp index
        assert compat.mpu.get_pipeline_model_parallel_world_size() == 4


def test_deepspeed_names_e8_with_sequence_parallel(use_mesh) -> None:
    # E8: (pp, dp, sp, tp) = (2, 2, 2, 2); sequence-data-parallel = dp_sp, never the plain dp group.
    for rank in range(16):
        use_mesh("pp=2,dp=2,sp=2,tp=2", 16, rank)
        dp_sp = next(g for g in ([0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]) if rank in g)
        assert groups._get_sequence_parallel_world_size() == 2
        assert groups._get_sequence_parallel_rank() == rank // 2 % 2
        assert groups._get_sequence_data_parallel_world_size() == 4
        assert groups._get_sequence_data_parallel_rank() == dp_sp.index(rank)
        assert groups._get_broadcast_src_rank() == dp_sp[0]
        assert groups._get_data_parallel_world_size() == 2 and groups._get_model_parallel_world_size() == 4
        assert groups.get_model_parallel_world_size() == 2  # AutoTP: model parallel = tp
        assert compat.get_data_parallel_world_size(with_context_parallel=True) == 4  # cp slot holds sp


def test_deepspeed_expert_names_e9(use_mesh) -> None:
    use_mesh("dp_replicate=2,dp_shard=4,tp=2,ep=4,etp=1", 16, 6)
    assert groups._get_expert_parallel_world_size("ep_size_4") == 4
    assert groups._get_expert_parallel_rank("ep_size_4") == 2 and groups._get_expert_parallel_src_rank() == 4
    assert groups._get_expert_data_parallel_world_size("ep_size_4") == 2
    assert groups._get_expert_data_parallel_rank() == 1
    assert compat.get_expert_model_parallel_world_size() == 4 and compat.get_expert_data_parallel_rank() == 1
    with pytest.raises(KeyError, match="one expert group, 'ep_size_4'"):
        groups._get_expert_parallel_group("ep_size_2")


def test_mpu_surface(use_mesh) -> None:
    use_mesh("dp=2,tp=2", 4, 3)
    assert compat.mpu.get_data_parallel_world_size() == 2 and compat.mpu.get_tensor_model_parallel_rank() == 1
    assert "get_model_parallel_group" in dir(compat.mpu)
    assert not hasattr(compat.mpu, "initialize_sequence_parallel")  # DeepSpeed would return a None dp group
    with pytest.raises(AttributeError, match="mpu has no 'get_foo'"):
        compat.mpu.get_foo  # noqa: B018


def test_megatron_expert_and_embedding_names_without_ep(use_mesh) -> None:
    # ep=1, etp = tp (Megatron's defaults) on dp=2,tp=2: expert-dp is [0, 2] / [1, 3], size 2 as in Megatron.
    for rank in range(4):
        use_mesh("dp=2,tp=2", 4, rank)
        assert compat.get_expert_data_parallel_world_size() == 2 and compat.get_expert_data_parallel_rank() == rank // 2
        assert (
            compat.get_expert_tensor_parallel_world_size() == 2 and compat.get_expert_tensor_parallel_rank() == rank % 2
        )
        assert (
            compat.get_expert_model_parallel_world_size() == 1 and compat.get_expert_model_parallel_src_rank() == rank
        )
        assert compat.get_expert_tensor_and_model_parallel_world_size() == 2
        assert (
            compat.get_tensor_and_data_parallel_world_size() == 4 and compat.get_tensor_and_data_parallel_rank() == rank
        )
        assert compat.is_rank_in_embedding_group() and compat.is_rank_in_position_embedding_group()


def test_middle_pipeline_stages_have_no_embedding_group(use_mesh) -> None:
    use_mesh("pp=4", 4, 1)
    assert not compat.is_rank_in_embedding_group() and not compat.is_rank_in_position_embedding_group()
    assert compat.get_embedding_group(check_initialized=False) is None
    with pytest.raises(RuntimeError, match=r"rank \(pipeline stage 1\) is in no embedding group"):
        compat.get_embedding_group()
