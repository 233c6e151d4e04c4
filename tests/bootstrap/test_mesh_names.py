"""The guard on torch's private DeviceMesh members (bootstrap/mesh_names.py): a torch without one of them gets a
MeshConfigError naming each missing member and the torch version, never an AttributeError. Stand-ins, no torch;
the real DeviceMesh of both torch versions CI runs: tests/mesh/test_ranks.py::test_plain_python_world_of_one
(the check passing, and failing before any group when a real mesh lacks _flatten_mapping)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from dslaunch.bootstrap.mesh_names import PRIVATE_ARGUMENTS, PRIVATE_ATTRIBUTES, TESTED, check_private
from dslaunch.mesh import MeshConfigError

ROOT = Path(__file__).resolve().parents[2]


class Mesh:
    """What name_views uses of torch's DeviceMesh, nothing more."""

    def __init__(
        self,
        device_type: str,
        mesh: Any = None,
        *,
        mesh_dim_names: tuple[str, ...] | None = None,
        _init_backend: bool = True,
        _layout: Any = None,
        _rank_map: Any = None,
        _root_mesh: Any = None,
    ) -> None:
        self._layout, self._rank_map = _layout, _rank_map
        self._flatten_mapping: dict[str, Any] = {}
        self._dim_group_names = ["0"]


def without_argument(name: str) -> type:
    """A Mesh whose constructor does not take ``name``."""

    class Changed(Mesh):
        pass

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        Mesh.__init__(self, *args, **kwargs)

    signature = inspect.signature(Mesh.__init__)
    init.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != name]
    )
    Changed.__init__ = init  # type: ignore[method-assign]
    return Changed


def without_attribute(name: str) -> Mesh:
    mesh = Mesh("cpu")
    delattr(mesh, name)
    return mesh


def test_a_torch_with_every_member_passes() -> None:
    check_private(Mesh, Mesh("cpu"), "2.13.0+cpu")


def test_a_missing_member_is_named_with_the_torch_version() -> None:
    with pytest.raises(MeshConfigError) as caught:
        check_private(Mesh, without_attribute("_flatten_mapping"), "2.99.0+cu140")
    assert str(caught.value) == (
        "mesh: torch 2.99.0+cu140 has no DeviceMesh._flatten_mapping: dslaunch uses these private DeviceMesh "
        "members to give the root mesh the names of views that already have their process groups "
        "(engine.mesh['dp'] after --mesh dp=2,tp=2); torch 2.13 and 2.15 have them. "
        "Use one of those, or a dslaunch release that supports this torch"
    )


@pytest.mark.parametrize("name", PRIVATE_ATTRIBUTES)
def test_each_attribute_is_checked(name: str) -> None:
    with pytest.raises(MeshConfigError, match=rf"^mesh: torch 2\.99\.0 has no DeviceMesh\.{name}: "):
        check_private(Mesh, without_attribute(name), "2.99.0")


@pytest.mark.parametrize("name", PRIVATE_ARGUMENTS)
def test_each_constructor_argument_is_checked(name: str) -> None:
    with pytest.raises(MeshConfigError, match=rf"^mesh: torch 2\.99\.0 has no DeviceMesh\({name}=\.\.\.\): "):
        check_private(without_argument(name), Mesh("cpu"), "2.99.0")


def test_everything_missing_is_named_at_once() -> None:
    mesh = without_attribute("_dim_group_names")
    with pytest.raises(
        MeshConfigError, match=r"has no DeviceMesh\(_root_mesh=\.\.\.\), DeviceMesh\._dim_group_names: "
    ):
        check_private(without_argument("_root_mesh"), mesh, "2.99.0")


def test_the_versions_named_are_the_ones_ci_runs() -> None:
    floor = re.search(r'"torch>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    newest = re.search(r"^torch==(\d+\.\d+)", (ROOT / "requirements" / "torch-newest.txt").read_text(), re.M)
    assert floor and newest
    assert TESTED == (floor[1], newest[1])
