"""`dslaunch --help`, `--version` and `--report` load click and the option areas' PARAMS, nothing of the plan.

Start-up is a benchmark target (docs/benchmarks.md): the plan, decide, the input parsers and their dataclasses
come in only when the options are parsed into a plan (dslaunch/cli/command.py's docstring).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# Imported by parsing, deciding or acting, never by --help.
NOT_FOR_HELP = (
    "dslaunch.plan",
    "dslaunch.cli.decide",
    "dslaunch.cli.slurm_hosts",
    "dslaunch.cli.run_ids",
    "dslaunch.cli.render",
    "dslaunch.inputs",
    "dslaunch.logs",
    "dslaunch.oslib",
    "dslaunch.runners",
    "dslaunch.job",
    "dslaunch.masking",
    "json",
)


def modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sys.modules), file=sys.stderr)"  # json would count itself
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stderr
    return set(out.splitlines()[-1].split())


@pytest.mark.launch
@pytest.mark.parametrize("args", [["--help"], ["--version"]])
def test_help_and_version_import_no_plan_machinery(args: list[str]) -> None:
    code = f"from dslaunch.cli import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass"
    loaded = modules_after(code)
    early = sorted(m for m in loaded if any(m == n or m.startswith(n + ".") for n in NOT_FOR_HELP))
    assert early == [], f"dslaunch {' '.join(args)} imports {early}"
