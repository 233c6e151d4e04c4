"""torchtitan's names on the root DeviceMesh (``engine.mesh["dp"]``, ``["dp", "tp"]``, ``.get_group("dp")``) for
the views that already have their process groups, and the check that torch still has what that takes.

torch names a group on the root only by making it: ``_flatten(name)``, what torchtitan calls, registers a new
1-D mesh with new process groups, and mesh_build uses it for every view that needs groups of its own. A view
that is one dim or another view (``dp`` of ``dp=2,tp=2`` is ``dp_shard``) and the expert views of
``_unflatten`` already have theirs; ``_flatten`` would make each again (W/k more communicators, each one GPU
memory under NCCL). So those names are given over the groups they have, through private DeviceMesh members
that any torch release may change: ``check_private`` looks for every one of them on a mesh made from WORLD
before any group exists, so a torch without one fails on every rank alike with a MeshConfigError that names it.
"""

from __future__ import annotations

import inspect
from typing import Any

from dslaunch.mesh import MeshConfigError

# The torch versions CI runs (pyproject's floor, requirements/torch-newest.txt); a test keeps this in step.
TESTED = ("2.13", "2.15")
# DeviceMesh(...) arguments that make a mesh over the root's ranks without new process groups.
PRIVATE_ARGUMENTS = ("_layout", "_rank_map", "_root_mesh", "_init_backend")
# Members read (and the last two written) to give a view's group its name on the root.
PRIVATE_ATTRIBUTES = ("_layout", "_rank_map", "_dim_group_names", "_flatten_mapping")


def missing_private(mesh_type: type, mesh: Any) -> list[str]:
    """The private arguments of ``mesh_type`` and members of ``mesh`` that ``name_views`` needs and they lack."""
    parameters = inspect.signature(mesh_type.__init__).parameters  # type: ignore[misc]
    missing = [f"DeviceMesh({name}=...)" for name in PRIVATE_ARGUMENTS if name not in parameters]
    return missing + [f"DeviceMesh.{name}" for name in PRIVATE_ATTRIBUTES if not hasattr(mesh, name)]


def check_private(mesh_type: type, mesh: Any, torch_version: str) -> None:
    """Raise a MeshConfigError naming what this torch lacks of what ``name_views`` uses (``mesh``: a built one)."""
    missing = missing_private(mesh_type, mesh)
    if missing:
        raise MeshConfigError(
            f"mesh: torch {torch_version} has no {', '.join(missing)}: dslaunch uses these private DeviceMesh "
            "members to give the root mesh the names of views that already have their process groups "
            f"(engine.mesh['dp'] after --mesh dp=2,tp=2); torch {' and '.join(TESTED)} have them. "
            "Use one of those, or a dslaunch release that supports this torch"
        )


def name_views(root: Any, meshes: dict[str, Any]) -> None:
    """Give the root every view's name that torch does not know yet, over the view's own process group (no new
    one): a view aliased to a dim or another view (``batch`` is ``dp``), and the expert views. ``root["dp"]``,
    ``root["dp", "tp"]`` and ``root.get_group("dp")`` then work as torchtitan's flattened names do, for every
    spec; a later ``_flatten`` to the same name and ranks returns it. ``check_private`` ran before any group.
    """
    from torch.distributed.device_mesh import DeviceMesh

    known = {*(root.mesh_dim_names or ()), *root._flatten_mapping}
    for name, mesh in meshes.items():
        if name in known or mesh.ndim != 1:
            continue
        alias = DeviceMesh(
            root.device_type,
            mesh_dim_names=(name,),
            _layout=mesh._layout,
            _rank_map=root._rank_map,
            _root_mesh=root,
            _init_backend=False,
        )
        alias._dim_group_names = list(mesh._dim_group_names)
        root._flatten_mapping[name] = alias
