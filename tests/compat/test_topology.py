"""The pipeline-grid topology (pure): DeepSpeed's axes, rank order and checkpoint names."""

from __future__ import annotations

import pytest

from dslaunch.bootstrap.mesh_build import BuiltMesh
from dslaunch.compat.grid import MeshGrid, ProcessTopology
from dslaunch.mesh import MeshConfigError, parse_spec, resolve


def test_e3_matches_the_mesh() -> None:
    topo = ProcessTopology(["pipe", "data", "model"], [2, 2, 2])
    layout = resolve(parse_spec("pp=2,dp=2,tp=2"), 8)
    assert topo.get_axis_comm_lists("pipe") == [[0, 4], [1, 5], [2, 6], [3, 7]] == layout.groups("pp")
    assert topo.get_axis_comm_lists("data") == layout.groups("dp")
    assert topo.get_axis_comm_lists("model") == layout.groups("tp")
    assert topo.filter_match(pipe=0, data=1) == [2, 3]
    for rank in range(8):
        coord = topo.get_coord(rank)
        assert topo.get_rank(**coord._asdict()) == rank
        mesh_coord = layout.coordinate(rank)
        assert (coord.pipe, coord.data, coord.model) == (mesh_coord["pp"], mesh_coord["dp_shard"], mesh_coord["tp"])


def test_rank_repr_for_checkpoint_names() -> None:
    topo = ProcessTopology(["pipe", "data", "model"], [2, 1, 2])
    assert [topo.get_rank_repr(r) for r in range(4)] == ["model_00", "model_01", "model_00", "model_01"]
    assert topo.get_rank_repr(3, omit_axes=[]) == "pipe_01-data_00-model_01"


def test_axis_lists_and_errors() -> None:
    topo = ProcessTopology(["a", "b"], [2, 3])
    assert topo.get_axis_list("a", 1) == [3, 4, 5]
    assert topo.get_axis_comm_lists("b") == [[0, 1, 2], [3, 4, 5]]
    assert topo.get_axis_comm_lists("zz") == []
    assert topo.get_dim("b") == 3 and topo.get_dim("zz") == 0
    with pytest.raises(ValueError, match="needs exactly the axes"):
        topo.get_rank(a=1)
    with pytest.raises(ValueError, match="not in a topology of 6 ranks"):
        topo.get_coord(6)


def _grid(text: str, world: int, rank: int) -> MeshGrid:
    # A BuiltMesh without torch: the grid's arithmetic reads only the layout.
    return MeshGrid(BuiltMesh(layout=resolve(parse_spec(text), world), rank=rank, root=None, meshes={}))


def test_grid_e3_every_rank() -> None:
    for rank in range(8):
        grid = _grid("pp=2,dp=2,tp=2", 8, rank)
        stage, data, model = rank // 4, rank // 2 % 2, rank % 2
        assert (grid.get_stage_id(), grid.get_data_parallel_id(), grid.get_slice_parallel_rank()) == (
            stage,
            data,
            model,
        )
        assert grid.topology().get_axis_names() == ["pipe", "data", "model"]
        assert grid.pp_group == [rank % 4, rank % 4 + 4]
        assert grid.dp_group == [rank - 2 * data, rank - 2 * data + 2]
        assert grid.stage_to_global(0) == rank % 4 and grid.stage_to_global(1) == rank % 4 + 4
        assert grid.stage_to_global(1, data=0) == 4 + model
        assert grid.stage_to_global(stage, model=1 - model) == rank + (1 if model == 0 else -1)
        assert grid.is_first_stage == (stage == 0) and grid.is_last_stage == (stage == 1)
        assert grid.get_model_parallel_world_size() == 4 and grid.get_model_parallel_rank() == 2 * stage + model
        assert grid.get_pipe_parallel_world_size() == 2 and grid.get_data_parallel_world_size() == 2
        assert grid.p2p_groups[rank] == [rank, (rank + 4) % 8]


def test_grid_pipe_data_without_tp_and_refuses_sequence_dims() -> None:
    grid = _grid("pp=4,dp=-1", 8, 5)  # DeepSpeed PipeDataParallelTopology(num_pp=4, num_dp=2)
    assert (grid.stage_id, grid.data_parallel_id) == (2, 1)
    assert [grid.stage_to_global(s) for s in range(4)] == [1, 3, 5, 7]
    assert grid.topology().get_rank_repr(5) == "model_00"
    with pytest.raises(MeshConfigError, match="cp/sp > 1 does not fit"):
        _grid("cp=2,dp=2", 4, 0)
