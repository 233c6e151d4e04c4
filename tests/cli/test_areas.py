"""Option areas stay in step with the modules they avoid importing at start-up."""

from dslaunch import mesh
from dslaunch.cli import mesh_options, restart_options
from dslaunch.plan import Restarts


def test_mesh_help_lists_the_real_dims() -> None:
    assert mesh_options.VALID_INPUT == mesh.VALID_INPUT


def test_restart_delay_default_is_the_plans() -> None:
    assert restart_options.DEFAULT_DELAY == Restarts().delay
