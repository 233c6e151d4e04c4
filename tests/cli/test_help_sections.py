"""`dslaunch --help` in sections: every option listed once, in the section its area declares, sections in order."""

from __future__ import annotations

import re

import click
import pytest
from click.testing import CliRunner

from dslaunch.cli import deepspeed_flags, help_sections
from dslaunch.cli.command import build_command

WIDTHS = (60, 80, 110, 200)
OPTION_NAME = re.compile(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*")


def rendered(width: int) -> str:
    result = CliRunner().invoke(build_command(), ["--help"], terminal_width=width)
    assert result.exit_code == 0, result.output
    return result.output


def options(command: click.Command) -> tuple[click.Context, list[click.Option]]:
    ctx = command.make_context("dslaunch", ["--preflight"])
    return ctx, [p for p in command.get_params(ctx) if isinstance(p, click.Option)]


def unsectioned(command: click.Command) -> list[str]:
    ctx, params = options(command)
    return [
        "/".join(p.opts)
        for p in params
        if help_sections.section_of(ctx, p) not in help_sections.ORDER and help_sections.help_row(ctx, p)
    ]


def section_slices(text: str) -> dict[str, str]:
    """Each section's text, from its title line to the next title."""
    titles = [(m.group(1), m.start()) for m in re.finditer(r"^(\S[^\n]*):\n", text, re.M) if m.group(1) != "Usage"]
    ends = [start for _, start in titles[1:]] + [len(text)]
    return {title: text[start:end] for (title, start), end in zip(titles, ends, strict=True)}


def test_every_option_has_a_section() -> None:
    missing = unsectioned(build_command())
    assert not missing, (
        f"{missing}: no --help section; declare each with help_sections.Option([...], section=help_sections.<one "
        f"of {', '.join(help_sections.ORDER)}>, ...) where its area declares its PARAMS (dslaunch/cli/help_sections.py)"
    )


def test_an_option_without_a_section_is_named_and_still_listed_last() -> None:
    command = build_command()
    command.params.append(click.Option(["--newcomer-option"], help="A newcomer without a section."))
    assert unsectioned(command) == ["--newcomer-option"]
    text = CliRunner().invoke(command, ["--help"], terminal_width=110).output
    assert list(section_slices(text))[-1] == help_sections.OTHER
    assert "--newcomer-option" in section_slices(text)[help_sections.OTHER]


@pytest.mark.parametrize("width", WIDTHS)
def test_sections_come_in_order_each_once_each_listing_options(width: int) -> None:
    text = rendered(width)
    titles = list(section_slices(text))
    assert titles == list(help_sections.ORDER), titles
    for title in titles:
        assert text.count(f"\n{title}:\n") == 1, title


@pytest.mark.parametrize("width", WIDTHS)
def test_every_option_is_listed_once_in_its_own_section(width: int) -> None:
    text = rendered(width)
    slices = section_slices(text)
    ctx, params = options(build_command())
    seen: dict[str, list[str]] = {}
    for param in params:
        row = help_sections.help_row(ctx, param)
        assert row is not None, param.opts
        name, _ = row
        section = help_sections.section_of(ctx, param)
        assert section is not None
        # a row is its name at the start of a line, after click's two-space indent
        row_start = re.compile(rf"^  {re.escape(name)}(  |$)", re.M)
        assert len(row_start.findall(text)) == 1, f"{name!r} is not listed exactly once"
        assert row_start.search(slices[section]), f"{name!r} is not under {section!r}"
        for option in OPTION_NAME.findall(name):
            seen.setdefault(option, []).append(section)
    twice = {option: sections for option, sections in seen.items() if len(sections) > 1}
    assert not twice, twice
    every_name = {o for p in params for o in (*p.opts, *p.secondary_opts)}
    assert every_name == set(seen), every_name ^ set(seen)


def test_each_section_lists_its_options() -> None:
    ctx, params = options(build_command())
    listed = {title for title, rows in help_sections.sectioned_rows(ctx, params) if rows}
    assert listed == set(help_sections.ORDER)


def test_the_most_used_come_first() -> None:
    text = rendered(110)
    job = section_slices(text)[help_sections.JOB]
    first = job.splitlines()[1]
    assert first.startswith("  --nproc-per-node"), first
    assert text.index("-H, --hostfile") < text.index("--rdzv-endpoint") < text.index("--max-restarts")


def test_descriptions_start_in_one_column_in_every_section() -> None:
    text = rendered(110)
    starts = {
        m.start(2) - m.start(1)
        for m in re.finditer(r"^  (-\S.*?  )(\S)", text, re.M)
        if len(m.group(1).rstrip()) < help_sections.COLUMN_MAX
    }
    assert len(starts) == 1, starts


def test_deepspeeds_spellings_each_say_what_becomes_of_them() -> None:
    section = " ".join(section_slices(rendered(200))[help_sections.DEEPSPEED].split())
    for flag in deepspeed_flags.TABLE:
        assert ", ".join(flag.names) in section
        assert " ".join(deepspeed_flags.help_text(flag).split()) in section
    texts = {flag.names[0]: deepspeed_flags.help_text(flag) for flag in deepspeed_flags.TABLE}
    assert texts["--num_gpus"] == "Use --nproc-per-node; checked against the hostfile's slots."
    assert texts["--autotuning"].startswith("Refused: ")
    assert texts["--no_ssh_check"].startswith("Ignored: ")


def test_deepspeeds_spellings_stay_hidden_from_the_environment() -> None:
    command = build_command()
    hidden = [p for p in command.params if isinstance(p, click.Option) and p.hidden]
    assert len(hidden) == len(deepspeed_flags.TABLE)
    assert not any(p.allow_from_autoenv or p.show_envvar for p in hidden)
