"""DeepSpeed ``deepspeed.utils.groups`` names over the dslaunch mesh.

Differences from DeepSpeed on purpose: ``_get_sequence_data_parallel_group`` is the real
flattened dp*sp (or dp*cp) group, never the plain dp group and never ``None``; expert
groups are keyed ``ep_size_<ep>`` but there is exactly one (the mesh's ep).
"""

from __future__ import annotations

from typing import Any

from dslaunch.compat._state import mesh, seq_dim
from dslaunch.compat.parallel_state import (  # the tensor-parallel getters are the same as Megatron's
    get_tensor_model_parallel_group,
    get_tensor_model_parallel_rank,
    get_tensor_model_parallel_src_rank,  # noqa: F401 - re-exported with the other three
    get_tensor_model_parallel_world_size,
)


def _sdp() -> str:
    return f"dp_{seq_dim()}"


# public AutoTP getters (in DeepSpeed's groups module, "model parallel" means tensor parallel)
get_model_parallel_group = get_tensor_model_parallel_group
get_model_parallel_world_size = get_tensor_model_parallel_world_size
get_model_parallel_rank = get_tensor_model_parallel_rank


def get_data_parallel_group() -> Any:
    return mesh().group("dp")


def get_data_parallel_world_size() -> int:
    return int(mesh().size("dp"))


def get_data_parallel_rank() -> int:
    return int(mesh().coordinate()["dp"])


# internal names used by the engine, ZeRO and MoE
_get_data_parallel_group = get_data_parallel_group
_get_data_parallel_world_size = get_data_parallel_world_size
_get_data_parallel_rank = get_data_parallel_rank


def _get_data_parallel_group_ranks() -> list[int]:
    return mesh().ranks("dp")


def _get_model_parallel_world_size() -> int:
    return int(mesh().size("mp"))


def _get_sequence_parallel_group() -> Any:
    return mesh().group(seq_dim())


def _get_sequence_parallel_world_size() -> int:
    return int(mesh().size(seq_dim()))


def _get_sequence_parallel_rank() -> int:
    return int(mesh().coordinate()[seq_dim()])


def _get_sequence_data_parallel_group() -> Any:
    return mesh().group(_sdp())


def _get_sequence_data_parallel_world_size() -> int:
    return int(mesh().size(_sdp()))


def _get_sequence_data_parallel_rank() -> int:
    return int(mesh().coordinate()[_sdp()])


def _get_broadcast_src_rank() -> int:
    return mesh().ranks(_sdp())[0]


def _expert_name(group_name: str | None) -> None:
    expected = f"ep_size_{mesh().size('ep')}"
    if group_name is not None and group_name != expected:
        raise KeyError(f"no expert group {group_name!r}: this mesh has one expert group, {expected!r} (from mesh ep)")


def _get_expert_parallel_group(group_name: str | None = None) -> Any:
    _expert_name(group_name)
    return mesh().group("ep")


def _get_expert_parallel_group_dict() -> dict[str, Any]:
    return {f"ep_size_{mesh().size('ep')}": mesh().group("ep")}


def _get_expert_parallel_world_size(group_name: str | None = None) -> int:
    _expert_name(group_name)
    return int(mesh().size("ep"))


def _get_expert_parallel_rank(group_name: str | None = None) -> int:
    _expert_name(group_name)
    return int(mesh().coordinate()["ep"])


def _get_expert_parallel_src_rank(group_name: str | None = None) -> int:
    _expert_name(group_name)
    return mesh().ranks("ep")[0]


def _get_expert_data_parallel_group(group_name: str | None = None) -> Any:
    _expert_name(group_name)
    return mesh().group("efsdp")


def _get_expert_data_parallel_group_dict() -> dict[str, Any]:
    return {f"ep_size_{mesh().size('ep')}": mesh().group("efsdp")}


def _get_expert_data_parallel_world_size(group_name: str | None = None) -> int:
    _expert_name(group_name)
    return int(mesh().size("efsdp"))


def _get_expert_data_parallel_rank(group_name: str | None = None) -> int:
    _expert_name(group_name)
    return int(mesh().coordinate()["efsdp"])


def _get_expert_model_parallel_world_size() -> int:
    return int(mesh().size("ep"))
