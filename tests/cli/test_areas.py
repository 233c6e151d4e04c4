"""Option areas stay in step with the modules they avoid importing at start-up."""

from dslaunch import mesh
from dslaunch.cli import mesh_options


def test_mesh_help_lists_the_real_dims() -> None:
    assert mesh_options.VALID_INPUT == mesh.VALID_INPUT
