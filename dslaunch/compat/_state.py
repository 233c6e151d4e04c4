"""The mesh the getters read: the process-wide engine's (no groups of their own)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dslaunch.bootstrap.mesh_build import BuiltMesh


def mesh() -> BuiltMesh:
    """The engine's BuiltMesh; raises if ``dslaunch.engine()`` has not run in this process."""
    from dslaunch.bootstrap.engine import current

    engine = current()
    built: BuiltMesh | None = engine.built_mesh if engine is not None else None
    if built is None:
        raise RuntimeError("no mesh yet: call dslaunch.engine() (it builds the mesh) before the parallel-state getters")
    return built


def is_initialized() -> bool:
    from dslaunch.bootstrap.engine import current

    engine = current()
    return engine is not None and engine.built_mesh is not None


def seq_dim() -> str:
    """The sequence slot: ``sp`` (Ulysses) when it is > 1, else ``cp``."""
    return "sp" if mesh().size("sp") > 1 else "cp"
