"""Choice options read their values as given (issue 22, item 9).

DeepSpeed's abbreviated option names (``--launcher_arg``) were expanded by click's token normaliser, which
click also applies to every Choice value: ``auto`` became ``autotuning`` in the message, an abbreviation of
a DeepSpeed option name would have matched as a value, and a value like ``num`` would have been called an
ambiguous option. Only option names before SCRIPT are expanded now.
"""

from __future__ import annotations

import click
import pytest

from dslaunch.cli import command, deepspeed_flags
from tests.plans import cli_error, plan_of


def _choice_options() -> list[click.Option]:
    return [
        p for p in command.build_command().params if isinstance(p, click.Option) and isinstance(p.type, click.Choice)
    ]


def test_there_are_choice_options_to_check() -> None:
    assert {p.name for p in _choice_options()} >= {"log_color", "log_format", "ds_log_level", "ds_autotuning"}


@pytest.mark.parametrize("option", _choice_options(), ids=lambda p: p.name)
@pytest.mark.parametrize("bad", ["0", "autot", "num", "launcher_arg", "never-ever"])
def test_a_bad_value_is_refused_naming_the_real_choices(option: click.Option, bad: str) -> None:
    assert isinstance(option.type, click.Choice)
    name = next(o for o in option.opts if o.startswith("--"))
    code, err = cli_error([name, bad, "--dry-run", "x.py"])
    choices = ", ".join(repr(str(c)) for c in option.type.choices)
    assert code == 2 and f"{bad!r} is not one of {choices}." in err, err


@pytest.mark.parametrize(("value", "color"), [("never", False), ("NEVER", False), ("always", True), ("auto", False)])
def test_the_real_choices_still_work_in_any_case(value: str, color: bool) -> None:
    plan = plan_of(["--log-color", value, "--dry-run", "x.py"], env={"NO_COLOR": None, "FORCE_COLOR": None})
    assert dict(plan.env)["DSLAUNCH_LOG_COLOR"] == ("1" if color else "0")


def test_deepspeed_abbreviations_still_expand_before_the_script_only() -> None:
    plan = plan_of(["--launcher_arg", "-x", "--master_p=29511", "--dry-run", "x.py", "--launcher_arg", "--num_g"])
    assert plan.launcher_args == ("-x",) and plan.master_port == 29511
    assert plan.program.args == ("--launcher_arg", "--num_g")


@pytest.mark.parametrize(
    ("args", "expanded"),
    [
        (["--launcher_arg", "--num_g", "x.py"], ["--launcher_args", "--num_g", "x.py"]),  # a value stays a value
        (["--num_g=2", "x.py", "--num_g"], ["--num_gpus=2", "x.py", "--num_g"]),
        (["-H", "--num_g", "--", "--num_g"], ["-H", "--num_g", "--", "--num_g"]),
        (["-mq", "--enable", "d", "x.py"], ["-mq", "--enable_each_rank_log", "d", "x.py"]),
        (["--nproc", "2", "x.py"], ["--nproc", "2", "x.py"]),  # v1 names are never abbreviated
        (["--log-color", "auto", "x.py"], ["--log-color", "auto", "x.py"]),
    ],
)
def test_which_tokens_are_expanded(args: list[str], expanded: list[str]) -> None:
    assert deepspeed_flags.expand_abbreviations(args, command.build_command().params) == expanded
