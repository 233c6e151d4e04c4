"""A ``PipelineParallelGrid``-compatible grid and ``ProcessTopology`` over the dslaunch mesh.

Axes are DeepSpeed's ``['pipe', 'data', 'model']`` (checkpoint names such as
``model_01`` depend on them): pipe = pp, data = dp_replicate*dp_shard, model = tp.
Both are row-major with the last axis fastest, like the mesh, so ranks agree exactly.
"""

from __future__ import annotations

import math
from collections import namedtuple
from typing import TYPE_CHECKING, Any

from dslaunch.compat._state import mesh
from dslaunch.mesh import MeshConfigError

if TYPE_CHECKING:
    from dslaunch.bootstrap.mesh_build import BuiltMesh


class ProcessTopology:
    """Rank <-> coordinate over named axes, row-major (last axis fastest)."""

    def __init__(self, axes: list[str], dims: list[int]) -> None:
        if len(axes) != len(dims):
            raise ValueError(f"axes {axes} and dims {dims} differ in length")
        self.axes, self.dims = list(axes), list(dims)
        self.ProcessCoord: Any = namedtuple("ProcessCoord", self.axes)  # type: ignore[misc]  # fields known at run time

    def world_size(self) -> int:
        return math.prod(self.dims)

    def get_axis_names(self) -> list[str]:
        return list(self.axes)

    def get_dim(self, axis: str) -> int:
        return self.dims[self.axes.index(axis)] if axis in self.axes else 0

    def get_coord(self, rank: int) -> Any:
        if not 0 <= rank < self.world_size():
            raise ValueError(f"rank {rank} is not in a topology of {self.world_size()} ranks")
        coord = []
        for dim in reversed(self.dims):
            rank, index = divmod(rank, dim)
            coord.append(index)
        return self.ProcessCoord(*reversed(coord))

    def get_rank(self, **coord: int) -> int:
        if sorted(coord) != sorted(self.axes):
            raise ValueError(f"get_rank needs exactly the axes {self.axes}, got {sorted(coord)}")
        rank = 0
        for axis, dim in zip(self.axes, self.dims):
            rank = rank * dim + coord[axis]
        return rank

    def get_rank_repr(
        self, rank: int, omit_axes: list[str] | None = None, inner_sep: str = "_", outer_sep: str = "-"
    ) -> str:
        omit = ["data", "pipe"] if omit_axes is None else omit_axes
        coord = self.get_coord(rank)
        return outer_sep.join(f"{axis}{inner_sep}{getattr(coord, axis):02d}" for axis in self.axes if axis not in omit)

    def filter_match(self, **filters: int) -> list[int]:
        return [
            r for r in range(self.world_size()) if all(getattr(self.get_coord(r), a) == v for a, v in filters.items())
        ]

    def get_axis_list(self, axis: str, idx: int) -> list[int]:
        return self.filter_match(**{axis: idx})

    def get_axis_comm_lists(self, axis: str) -> list[list[int]]:
        """Every group that varies only ``axis``, each in axis order."""
        if axis not in self.axes:
            return []
        groups: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size()):
            coord = self.get_coord(rank)
            key = tuple(getattr(coord, a) for a in self.axes if a != axis)
            groups.setdefault(key, []).append(rank)
        return [g for g in groups.values() if len(g) > 1]


class MeshGrid:
    """The ``PipelineParallelGrid`` surface (``PipelineModule._grid``, ``mpu`` for PipelineEngine)."""

    def __init__(self, built: BuiltMesh | None = None) -> None:
        self._mesh = built = mesh() if built is None else built
        if built.size("cp") > 1 or built.size("sp") > 1:
            raise MeshConfigError("the pipeline grid has axes pipe, data, model only; cp/sp > 1 does not fit it")
        self._topo = ProcessTopology(["pipe", "data", "model"], [built.size("pp"), built.size("dp"), built.size("tp")])
        self.global_rank = built.rank
        self.world_size = built.layout.world_size
        self.pipe_parallel_size = built.size("pp")
        self.data_parallel_size = built.size("dp")
        self.model_parallel_size = self.slice_parallel_size = built.size("tp")
        coord = self._topo.get_coord(self.global_rank)
        self.stage_id, self.data_parallel_id = coord.pipe, coord.data
        self.pp_group, self.dp_group = built.ranks("pp"), built.ranks("dp")
        self.is_first_stage = self.stage_id == 0
        self.is_last_stage = self.stage_id == self.pipe_parallel_size - 1
        self.p2p_groups = [[r, self._next_stage(r)] for r in range(self.world_size)]  # data only, no groups
        self.ds_model_rank = built.coordinate()["mp"]

    # Process groups are looked up on use, so the grid's arithmetic needs no process group.
    @property
    def pp_proc_group(self) -> Any:
        return self._mesh.group("pp")

    @property
    def dp_proc_group(self) -> Any:
        return self._mesh.group("dp")

    @property
    def slice_proc_group(self) -> Any:
        return self._mesh.group("tp")

    @property
    def ds_model_proc_group(self) -> Any:
        return self._mesh.group("mp")

    def _next_stage(self, rank: int) -> int:
        coord = self._topo.get_coord(rank)._asdict()
        coord["pipe"] = (coord["pipe"] + 1) % self.pipe_parallel_size
        return self._topo.get_rank(**coord)

    def topology(self) -> ProcessTopology:
        return self._topo

    def get_stage_id(self) -> int:
        return int(self.stage_id)

    def get_data_parallel_id(self) -> int:
        return int(self.data_parallel_id)

    def get_global_rank(self) -> int:
        return self.global_rank

    def stage_to_global(self, stage_id: int, **kwargs: int) -> int:
        coord = self._topo.get_coord(self.global_rank)._asdict()
        coord.update(kwargs, pipe=stage_id)
        return self._topo.get_rank(**coord)

    def get_pipe_parallel_rank(self) -> int:
        return self.get_stage_id()

    def get_pipe_parallel_world_size(self) -> int:
        return self.pipe_parallel_size

    def get_pipe_parallel_group(self) -> Any:
        return self.pp_proc_group

    def get_data_parallel_rank(self) -> int:
        return self.get_data_parallel_id()

    def get_data_parallel_world_size(self) -> int:
        return self.data_parallel_size

    def get_data_parallel_group(self) -> Any:
        return self.dp_proc_group

    def get_data_parallel_group_ranks(self) -> list[int]:
        return list(self.dp_group)

    # "model" in the grid's mpu methods is pipe x model (all ranks holding one replica).
    def get_model_parallel_rank(self) -> int:
        return int(self.ds_model_rank)

    def get_model_parallel_world_size(self) -> int:
        return self.pipe_parallel_size * self.model_parallel_size

    def get_model_parallel_group(self) -> Any:
        return self.ds_model_proc_group

    def get_slice_parallel_rank(self) -> int:
        return int(self._topo.get_coord(self.global_rank).model)

    def get_slice_parallel_world_size(self) -> int:
        return self.slice_parallel_size

    def get_slice_parallel_group(self) -> Any:
        return self.slice_proc_group

    get_pipeline_model_parallel_rank = get_pipe_parallel_rank
    get_pipeline_model_parallel_world_size = get_pipe_parallel_world_size
    get_pipeline_model_parallel_group = get_pipe_parallel_group
    get_tensor_model_parallel_rank = get_slice_parallel_rank
    get_tensor_model_parallel_world_size = get_slice_parallel_world_size
    get_tensor_model_parallel_group = get_slice_parallel_group
