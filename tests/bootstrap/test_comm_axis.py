"""The mesh-axis keyword is ``axis=``; ``dim=`` is its deprecated alias (pure: no ranks, no process group).

The real collectives with ``axis=`` and with the alias run on gloo ranks in scripts/engine_api.py.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from typing import Any

import pytest

from dslaunch import mesh
from dslaunch.bootstrap.comm import Comm

METHODS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier")


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a process that has not warned yet."""
    monkeypatch.setattr(mesh, "_DIM_WARNED", set())


class NoMesh:
    """A mesh that fails on any use: the axis keywords must be settled before a group is looked up."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"mesh.{name} used")


@pytest.mark.parametrize("method", METHODS)
def test_every_comm_method_takes_axis_and_a_keyword_only_dim(method: str) -> None:
    params = inspect.signature(getattr(Comm, method)).parameters
    assert params["axis"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and params["axis"].default is None
    assert params["dim"].kind is inspect.Parameter.KEYWORD_ONLY and params["dim"].default is None
    assert list(params).index("axis") == (1 if method == "barrier" else 2)  # where dim= was: positional calls keep


@pytest.mark.parametrize("method", METHODS)
def test_axis_and_dim_together_is_a_type_error_before_any_collective(method: str) -> None:
    had_torch = "torch" in sys.modules
    args = () if method == "barrier" else (object(),)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no deprecation warning either
        with pytest.raises(TypeError, match=rf"engine\.comm\.{method}\(\) got both axis='tp' and dim='dp'"):
            getattr(Comm(NoMesh()), method)(*args, axis="tp", dim="dp")
    assert had_torch or "torch" not in sys.modules


def test_dim_warns_once_per_process_at_the_callers_line() -> None:
    with pytest.warns(DeprecationWarning, match=r"^f\(dim=\.\.\.\) is deprecated, use axis='dp'") as record:
        assert mesh.axis_alias(None, "dp", api="f", call="f", stacklevel=2) == "dp"
    assert len(record) == 1 and record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mesh.axis_alias(None, "tp", api="f", call="f") == "tp"  # warned already: silent
        assert mesh.axis_alias("tp", None, api="g", call="g") == "tp"
        assert mesh.axis_alias(None, None, api="g", call="g") is None  # the caller's default applies
    with pytest.warns(DeprecationWarning, match=r"^g\(dim=\.\.\.\)"):
        mesh.axis_alias(None, "dp", api="g", call="g")  # another API warns once of its own


def test_a_warning_raised_as_an_error_is_not_marked_as_given() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # -W error: every use of dim= fails, not just the first
            with pytest.raises(DeprecationWarning):
                mesh.axis_alias(None, "dp", api="f", call="f")


def test_both_given_is_a_type_error_even_with_the_same_name() -> None:
    with pytest.raises(TypeError, match=r"f\(\) got both axis='dp' and dim='dp'; dim= is the deprecated alias"):
        mesh.axis_alias("dp", "dp", api="f", call="f")
