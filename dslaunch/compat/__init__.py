"""Back-compat getters over the dslaunch mesh: no process groups of their own.

- Megatron ``parallel_state`` names: ``from dslaunch.compat import get_data_parallel_group``
  (also ``dslaunch.compat.parallel_state``).
- DeepSpeed ``deepspeed.utils.groups`` names: ``dslaunch.compat.groups`` (``_get_*`` also here).
- ``mpu``: an object with the Megatron-style methods, for code that takes one.
- ``MeshGrid`` / ``ProcessTopology``: the ``PipelineParallelGrid`` surface.

Call ``dslaunch.engine()`` first: the getters read its mesh.
"""

from __future__ import annotations

from typing import Any

from dslaunch.compat import groups, parallel_state
from dslaunch.compat._state import is_initialized
from dslaunch.compat.grid import MeshGrid, ProcessTopology
from dslaunch.compat.groups import *  # noqa: F403
from dslaunch.compat.groups import (  # underscore names are not star-exported
    _get_broadcast_src_rank,
    _get_data_parallel_group,
    _get_data_parallel_group_ranks,
    _get_data_parallel_rank,
    _get_data_parallel_world_size,
    _get_expert_data_parallel_group,
    _get_expert_data_parallel_group_dict,
    _get_expert_data_parallel_rank,
    _get_expert_data_parallel_world_size,
    _get_expert_model_parallel_world_size,
    _get_expert_parallel_group,
    _get_expert_parallel_group_dict,
    _get_expert_parallel_rank,
    _get_expert_parallel_src_rank,
    _get_expert_parallel_world_size,
    _get_model_parallel_world_size,
    _get_sequence_data_parallel_group,
    _get_sequence_data_parallel_rank,
    _get_sequence_data_parallel_world_size,
    _get_sequence_parallel_group,
    _get_sequence_parallel_rank,
    _get_sequence_parallel_world_size,
)
from dslaunch.compat.parallel_state import *  # noqa: F403 - Megatron names win

# DeepSpeed checks hasattr(mpu, "initialize_sequence_parallel") and then returns a None dp
# group: this mpu deliberately has no such attribute.
MPU_METHODS = tuple(n for n in dir(parallel_state) if n.startswith(("get_", "is_pipeline")))


class MeshMpu:
    """An ``mpu`` (Megatron-style methods) for DeepSpeed or Megatron code that takes one."""

    def __getattr__(self, name: str) -> Any:
        if name in MPU_METHODS:
            return getattr(parallel_state, name)
        raise AttributeError(f"mpu has no {name!r}; it offers {', '.join(MPU_METHODS)}")

    def __dir__(self) -> list[str]:
        return sorted(MPU_METHODS)


mpu = MeshMpu()

__all__ = [  # noqa: PLE0604 - the mpu method names are computed
    "MeshGrid",
    "MeshMpu",
    "ProcessTopology",
    "groups",
    "is_initialized",
    "mpu",
    "parallel_state",
    *MPU_METHODS,
]
