"""Megatron ``parallel_state`` names over the dslaunch mesh.

``dp`` is dp_replicate*dp_shard; ``with_context_parallel=True`` adds the cp (or sp)
slot; ``model parallel`` is pp*tp (Megatron's ``tp-pp`` group).
"""

from __future__ import annotations

from typing import Any

from dslaunch.compat._state import is_initialized, mesh, seq_dim


def _dp(with_context_parallel: bool) -> str:
    return f"dp_{seq_dim()}" if with_context_parallel else "dp"


def model_parallel_is_initialized() -> bool:
    return is_initialized()


def destroy_model_parallel() -> None:
    """Nothing to do: the groups belong to the engine's mesh (engine.close() tears them down)."""


# tensor model parallel (tp)
def get_tensor_model_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("tp")


def get_tensor_model_parallel_world_size() -> int:
    return int(mesh().size("tp"))


def get_tensor_model_parallel_rank() -> int:
    return int(mesh().coordinate()["tp"])


def get_tensor_model_parallel_src_rank() -> int:
    return mesh().ranks("tp")[0]


# pipeline model parallel (pp)
def get_pipeline_model_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("pp")


def get_pipeline_model_parallel_world_size() -> int:
    return int(mesh().size("pp"))


def get_pipeline_model_parallel_rank() -> int:
    return int(mesh().coordinate()["pp"])


def get_pipeline_model_parallel_first_rank() -> int:
    return mesh().ranks("pp")[0]


def get_pipeline_model_parallel_last_rank() -> int:
    return mesh().ranks("pp")[-1]


def get_pipeline_model_parallel_next_rank() -> int:
    ranks = mesh().ranks("pp")
    return ranks[(get_pipeline_model_parallel_rank() + 1) % len(ranks)]


def get_pipeline_model_parallel_prev_rank() -> int:
    ranks = mesh().ranks("pp")
    return ranks[(get_pipeline_model_parallel_rank() - 1) % len(ranks)]


def is_pipeline_first_stage(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    return get_pipeline_model_parallel_rank() == 0


def is_pipeline_last_stage(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    return get_pipeline_model_parallel_rank() == get_pipeline_model_parallel_world_size() - 1


# data parallel (dp = dp_replicate * dp_shard; with cp/sp: dp_cp / dp_sp)
def get_data_parallel_group(with_context_parallel: bool = False, partial_data_parallel: bool = False) -> Any:
    return mesh().group("dp_shard_cp" if partial_data_parallel else _dp(with_context_parallel))


def get_data_parallel_world_size(with_context_parallel: bool = False, partial_data_parallel: bool = False) -> int:
    return int(mesh().size("dp_shard_cp" if partial_data_parallel else _dp(with_context_parallel)))


def get_data_parallel_rank(with_context_parallel: bool = False, partial_data_parallel: bool = False) -> int:
    return int(mesh().coordinate()["dp_shard_cp" if partial_data_parallel else _dp(with_context_parallel)])


def get_data_parallel_src_rank(with_context_parallel: bool = False) -> int:
    return mesh().ranks(_dp(with_context_parallel))[0]


def get_data_parallel_group_ranks(with_context_parallel: bool = False) -> list[int]:
    return mesh().ranks(_dp(with_context_parallel))


# context parallel (cp)
def get_context_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("cp")


def get_context_parallel_world_size() -> int:
    return int(mesh().size("cp"))


def get_context_parallel_rank() -> int:
    return int(mesh().coordinate()["cp"])


def get_context_parallel_global_ranks(check_initialized: bool = True) -> list[int]:
    return mesh().ranks("cp")


# model parallel (mp = pp * tp)
def get_model_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("mp")


def get_model_parallel_world_size() -> int:
    return int(mesh().size("mp"))


def get_model_parallel_rank() -> int:
    return int(mesh().coordinate()["mp"])


def get_model_parallel_src_rank() -> int:
    return mesh().ranks("mp")[0]


# tensor and data parallel (tp_dp; with the cp/sp slot: tp_dp_cp)
def get_tensor_and_data_parallel_group(check_initialized: bool = True, with_context_parallel: bool = False) -> Any:
    return mesh().group("tp_dp_cp" if with_context_parallel else "tp_dp")


def get_tensor_and_data_parallel_world_size(with_context_parallel: bool = False) -> int:
    return int(mesh().size("tp_dp_cp" if with_context_parallel else "tp_dp"))


def get_tensor_and_data_parallel_rank(with_context_parallel: bool = False) -> int:
    return int(mesh().coordinate()["tp_dp_cp" if with_context_parallel else "tp_dp"])


# embedding: the first and last stage of each pp group; position embedding: the first stage
def get_embedding_group(check_initialized: bool = True) -> Any:
    return _embedding(mesh().embedding_group(), "embedding", check_initialized)


def get_position_embedding_group(check_initialized: bool = True) -> Any:
    return _embedding(mesh().position_embedding_group(), "position embedding", check_initialized)


def _embedding(group: Any, what: str, check_initialized: bool) -> Any:
    if group is None and check_initialized:
        stage = get_pipeline_model_parallel_rank()
        raise RuntimeError(f"this rank (pipeline stage {stage}) is in no {what} group, as in Megatron")
    return group


def is_rank_in_embedding_group(ignore_virtual: bool = True, vp_stage: int | None = None) -> bool:
    stages = mesh().ranks("pp")
    return mesh().rank in (stages[0], stages[-1])


def is_rank_in_position_embedding_group() -> bool:
    return mesh().rank == mesh().ranks("pp")[0]


# expert parallel: the dense region dp_shard*cp*sp*tp as (efsdp, ep, etp), etp fastest; emp = ep*etp
def get_expert_model_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("ep")


def get_expert_model_parallel_world_size() -> int:
    return int(mesh().size("ep"))


def get_expert_model_parallel_rank() -> int:
    return int(mesh().coordinate()["ep"])


def get_expert_model_parallel_src_rank() -> int:
    return mesh().ranks("ep")[0]


def get_expert_tensor_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("etp")


def get_expert_tensor_parallel_world_size() -> int:
    return int(mesh().size("etp"))


def get_expert_tensor_parallel_rank() -> int:
    return int(mesh().coordinate()["etp"])


def get_expert_tensor_and_model_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("emp")


def get_expert_tensor_and_model_parallel_world_size() -> int:
    return int(mesh().size("emp"))


def get_expert_tensor_and_model_parallel_rank() -> int:
    return int(mesh().coordinate()["emp"])


def get_expert_data_parallel_group(check_initialized: bool = True) -> Any:
    return mesh().group("efsdp")


def get_expert_data_parallel_world_size() -> int:
    return int(mesh().size("efsdp"))


def get_expert_data_parallel_rank() -> int:
    return int(mesh().coordinate()["efsdp"])
