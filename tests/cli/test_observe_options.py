"""--breakdown-every, --straggler-*, --metrics-*, --total-steps, --trainer-status-every: parsed, refused with exit
2, and in step with dslaunch.observe."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dslaunch.cli import observe_options
from dslaunch.cli.command import build_command
from dslaunch.observe import settings


def test_defaults_in_step_with_the_observer() -> None:
    assert observe_options.DEFAULT_EVERY == settings.DEFAULT_EVERY
    assert observe_options.DEFAULT_FACTOR == settings.DEFAULT_FACTOR
    assert observe_options.DEFAULT_STEPS == settings.DEFAULT_STEPS
    assert observe_options.DEFAULT_STATUS_EVERY == settings.DEFAULT_STATUS_EVERY


@pytest.mark.parametrize(("text", "value"), [("100", (100, None)), ("30s", (None, 30.0)), (" 7 ", (7, None))])
def test_every(text: str, value: tuple[int | None, float | None]) -> None:
    assert observe_options.Every().convert(text, None, None) == value


@pytest.mark.parametrize(
    ("text", "value"), [("9400", ("", 9400)), ("127.0.0.1:9400", ("127.0.0.1", 9400)), ("[::1]:80", ("::1", 80))]
)
def test_listen(text: str, value: tuple[str, int]) -> None:
    assert observe_options.Listen().convert(text, None, None) == value


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--breakdown-every", "0"], "is not a period"),
        (["--breakdown-every", "5m"], "is not a period"),
        (["--metrics-port", "0"], "is not a port"),
        (["--metrics-port", "70000"], "is not a port"),
        (["--straggler-factor", "1"], "not a factor above the median"),
        (["--straggler-factor", "nan"], "not a number of seconds"),
        (["--straggler-steps", "0"], "not in the range"),
        (["--total-steps", "0"], "not in the range"),
        (["--trainer-status-every", "0.05"], "post at most every 0.1 s, or 0 for off"),
        (["--trainer-status-every", "-1"], "not a number of seconds"),
    ],
)
def test_bad_values_exit_2(args: list[str], message: str) -> None:
    result = CliRunner().invoke(build_command(), [*args, "--dry-run", "x.py"])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_the_settings() -> None:
    values = {
        "breakdown_every": (None, 60.0),
        "straggler_factor": 2.0,
        "straggler_steps": 10,
        "metrics_port": ("", 9400),
    }
    s = observe_options.parse(values, "/logs", {"wall_clock_breakdown": True})
    assert (s.breakdown, s.every_steps, s.every_seconds, s.window, s.metrics_port, s.log_dir) == (
        True,
        None,
        60.0,
        10,
        9400,
        "/logs",
    )
    assert s.rank_env() == {"DSLAUNCH_WINDOW_STEPS": "10"}
    off = observe_options.parse(
        {"straggler_factor": 0.0, "wall_clock_breakdown": False}, None, {"wall_clock_breakdown": True}
    )
    assert not off.collect and off.rank_env() == {}


@pytest.mark.parametrize(
    ("environ", "every", "posts"),
    [
        ({}, 30.0, False),  # not under Kubeflow Trainer
        ({settings.STATUS_URL: ""}, 30.0, False),
        ({settings.STATUS_URL: "https://trainer:8082/status"}, 30.0, True),
        ({settings.STATUS_URL: "https://trainer:8082/status"}, 0.0, False),  # off: the script reports itself
    ],
)
def test_the_progress_api_is_on_where_its_variable_is_set(environ: dict[str, str], every: float, posts: bool) -> None:
    values = {"straggler_factor": 0.0, "trainer_status_every": every, "total_steps": 1000}
    s = observe_options.parse(values, None, {}, environ=environ)
    assert (s.trainer_status, s.collect, s.status_every, s.total_steps) == (posts, posts, every, 1000)
