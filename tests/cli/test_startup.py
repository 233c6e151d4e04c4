"""`dslaunch --help`, `--version` and `--report` load click and the option areas' PARAMS, nothing of the plan.

Start-up is a benchmark target (docs/benchmarks.md): the plan, decide, the input parsers and their dataclasses
come in only when the options are parsed into a plan (dslaunch/cli/command.py's docstring).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Imported by parsing, deciding or acting, never by --help.
NOT_FOR_HELP = (
    "dslaunch.plan",
    "dslaunch.cli.decide",
    "dslaunch.cli.slurm_hosts",
    "dslaunch.cli.run_ids",
    "dslaunch.cli.plan_text",
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


@pytest.mark.launch
def test_a_local_launch_imports_no_prober(tmp_path: Path) -> None:
    """Hosts are probed only for spares and node ranges: a fixed local job never loads the --preflight prober (nor
    its thread pool)."""
    script = tmp_path / "ok.py"
    script.write_text("pass\n")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "dslaunch", "--nproc-per-node", "1", "--master-port", "0", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    assert "dslaunch.job.attempts" in imported  # the launch path was traced
    assert {"dslaunch.runners.preflight", "concurrent.futures"} & imported == set()
