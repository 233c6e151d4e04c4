"""Option areas stay in step with the modules they avoid importing at start-up."""

from dslaunch import mesh
from dslaunch.cli import mesh_options, restart_options
from dslaunch.plan import Restarts


def test_mesh_help_lists_the_real_dims() -> None:
    assert mesh_options.VALID_INPUT == mesh.VALID_INPUT


def test_restart_delay_default_is_the_plans() -> None:
    assert restart_options.DEFAULT_DELAY == Restarts().delay


def test_repeat_window_default_is_the_plans() -> None:
    assert restart_options.DEFAULT_REPEAT_WINDOW == Restarts().repeat_window


def test_the_stop_graces_default_is_the_plans() -> None:
    from dslaunch.cli import stop_options
    from dslaunch.plan import DEFAULT_STOP_GRACE, LaunchPlan

    assert stop_options.DEFAULT_GRACE == DEFAULT_STOP_GRACE
    assert LaunchPlan.__dataclass_fields__["stop_grace"].default == DEFAULT_STOP_GRACE
