"""The pipeline-grid topology (pure): DeepSpeed's axes, rank order and checkpoint names."""

from __future__ import annotations

import pytest

from dslaunch.compat.grid import ProcessTopology
from dslaunch.mesh import parse_spec, resolve


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
