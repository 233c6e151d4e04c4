"""The --log-level grammar, precedence, rank filter and colour choice (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.cli.log_options import merged_spec
from dslaunch.errors import DslaunchError
from dslaunch.logs import spec as S

GOOD = [
    ("info", "info"),
    ("comm=debug", "warning,comm=debug"),
    ("warning,comm=debug,launcher=info", "warning,comm=debug,launcher=info"),
    ("+comm,-agent", "warning,agent=error,comm=debug"),
    ("+comm, -agent", "warning,agent=error,comm=debug"),
    ("Comm=DEBUG", "warning,comm=debug"),
    ("error,timers=off", "error,timers=off"),
    ("py:urllib3=debug,user.zero=info", "warning,py:urllib3=debug,user.zero=info"),
    ("WARN", "warning"),
    ("  debug  ", "debug"),
    ("torch=info,user.trainer=debug", "warning,torch=info,user.trainer=debug"),
]

BAD = [
    ("com=debug", ["unknown module 'com'", "did you mean 'comm'"]),
    ("comm=verbose", ["unknown level 'verbose'", "debug, info, warning, error, critical, off"]),
    ("debug,,comm=info", ["empty item #2"]),
    ("comm=debug,comm=info", ["module 'comm' set twice"]),
    ("debug,info", ["default level given twice"]),
    ("", ["empty log spec"]),
    ("comm", ["'comm' has no level", "comm=info"]),
    ("inof", ["cannot parse item 'inof'", "did you mean 'info'"]),
    ("+comm=debug", ["use either"]),
    ("comm=", ["missing level"]),
    ("=debug", ["missing module"]),
    ("user..zero=info", ["bad module name"]),
    ("py:1bad=info", ["bad stdlib logger name"]),
    ("+", ["missing module"]),
    ("engine=info", ["unknown module 'engine'"]),  # nothing logs there: not offered
    ("-builder", ["unknown module 'builder'"]),
]


@pytest.mark.parametrize(("text", "canonical"), GOOD)
def test_good_specs(text: str, canonical: str) -> None:
    spec = S.parse_spec(text)
    assert spec.canonical() == canonical
    assert S.parse_spec(spec.canonical()).canonical() == canonical


@pytest.mark.parametrize(("text", "needles"), BAD)
def test_bad_specs_name_the_item(text: str, needles: list[str]) -> None:
    with pytest.raises(S.SpecError) as info:
        S.parse_spec(text)
    for needle in needles:
        assert needle in str(info.value)


@given(st.text(alphabet=st.sampled_from(list("abcdeglmnortuwy+-=,:. _CD")), max_size=30))
@settings(max_examples=400, deadline=None)
def test_any_string_parses_or_fails_cleanly(text: str) -> None:
    try:
        spec = S.parse_spec(text)
    except S.SpecError as exc:
        assert str(exc)
        return
    assert S.parse_spec(spec.canonical()) == S.LogSpec(spec.default or S.WARNING, spec.modules)


@given(st.text(max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_unicode_parses_or_fails_cleanly(text: str) -> None:
    try:
        S.parse_spec(text)
    except S.SpecError:
        pass


@pytest.mark.parametrize(
    ("text", "module", "channels", "level"),
    [
        ("warning", "comm", (), S.WARNING),
        ("comm=debug", "comm.ops", (), S.DEBUG),
        ("comm=debug,comm.ops=error", "comm.ops", (), S.ERROR),
        ("info", "user.zero", (), S.INFO),
        ("warning", "timers", ("timers",), S.INFO),
        ("timers=off", "timers", ("timers",), S.OFF),
        ("error", "timers", ("timers",), S.INFO),
        ("warning", "comm.summary", (), S.WARNING),
        ("warning", "comm.summary", ("comm.summary",), S.INFO),
        ("comm=error", "comm.summary", ("comm.summary",), S.ERROR),
        ("comm=info", "comm.summary", (), S.INFO),
    ],
)
def test_most_specific_setting_wins(text: str, module: str, channels: tuple[str, ...], level: int) -> None:
    assert S.parse_spec(text).level_for(module, frozenset(channels)) == level


@pytest.mark.parametrize(
    ("cli", "env", "config", "canonical"),
    [
        (None, None, {}, "warning"),
        (None, None, {"log_level": "info"}, "info"),
        (None, "error", {"log_level": "info"}, "error"),
        ("debug", "error", {"log_level": "info"}, "debug"),
        ("comm=debug", "error", {"log_level": "info,user=debug"}, "error,comm=debug,user=debug"),
        ("comm=info", "comm=debug,launcher=info", {"log_level": "comm=error"}, "warning,comm=info,launcher=info"),
        (None, "", {"log_level": "debug"}, "debug"),
    ],
)
def test_precedence_cli_over_env_over_config(cli: str | None, env: str | None, config: dict, canonical: str) -> None:
    assert merged_spec(cli, env, config).canonical() == canonical


def test_bad_env_and_config_name_their_source() -> None:
    with pytest.raises(DslaunchError, match="DSLAUNCH_LOG_LEVEL") as env_error:
        merged_spec(None, "com=debug", {})
    assert env_error.value.option is None
    with pytest.raises(DslaunchError, match="log_level") as config_error:
        merged_spec(None, None, {"log_level": "loud"})
    assert config_error.value.option == "--config"
    with pytest.raises(DslaunchError, match="must be a string"):
        merged_spec(None, None, {"log_level": 10})


@pytest.mark.parametrize(
    ("text", "yes", "no", "canonical"),
    [
        ("0", [0], [1, 8], "0"),
        ("all", [0, 5, 1000], [], "all"),
        ("none", [], [0, 1], "none"),
        ("0,8-15", [0, 8, 12, 15], [1, 7, 16], "0,8-15"),
        (" 3 , 1 ", [1, 3], [2], "1,3"),
    ],
)
def test_rank_filter(text: str, yes: list[int], no: list[int], canonical: str) -> None:
    filt = S.parse_ranks(text)
    assert all(filt.selects(r) for r in yes)
    assert not any(filt.selects(r) for r in no)
    assert filt.canonical() == canonical


@pytest.mark.parametrize(
    ("text", "rank", "local", "node", "selected"),
    [
        ("local:0", 8, 0, 1, True),
        ("local:0", 9, 1, 1, False),
        ("node:1-2", 9, 1, 1, True),
        ("node:1-2", 1, 1, 0, False),
        ("0,local:1", 0, 0, 0, True),
        ("0,local:1", 5, 1, 2, True),
        ("local:0", 3, None, None, False),
    ],
)
def test_rank_filter_local_and_node(text: str, rank: int, local: int | None, node: int | None, selected: bool) -> None:
    assert S.parse_ranks(text).selects(rank, local, node) is selected
    assert S.parse_ranks(S.parse_ranks(text).canonical()) == S.parse_ranks(text)


@pytest.mark.parametrize("text", ["", "x", "1-", "5-2", "0,,1", "-1", "local:", "gpu:0", "local:3-1"])
def test_bad_rank_filter(text: str) -> None:
    with pytest.raises(S.SpecError):
        S.parse_ranks(text)


@pytest.mark.parametrize(
    ("choice", "tty", "env", "color"),
    [
        ("auto", True, {}, True),
        ("auto", False, {}, False),
        ("auto", True, {"NO_COLOR": "1"}, False),
        ("auto", False, {"FORCE_COLOR": "1"}, True),
        ("auto", True, {"NO_COLOR": "1", "FORCE_COLOR": "1"}, False),
        ("never", True, {"FORCE_COLOR": "1"}, False),
        ("always", False, {"NO_COLOR": "1"}, True),
    ],
)
def test_colour_choice(choice: str, tty: bool, env: dict, color: bool) -> None:
    assert S.decide_color(choice, tty, env) is color


def test_help_lists_every_module() -> None:
    text = S.help_text()
    for module in (
        "launcher",
        "runner",
        "agent",
        "bootstrap",
        "mesh",
        "comm",
        "timers",
        "user",
        "torch",
        "py:NAME",
    ):
        assert f"  {module} " in text
