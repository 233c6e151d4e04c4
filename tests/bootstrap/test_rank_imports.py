"""A trivial rank's bootstrap stays cheap: what it imports beyond a bare ``python`` is dslaunch's own small modules.

Each rank pays its bootstrap's imports before its script runs, and a launch's start-up is a benchmark target
(docs/benchmarks.md, issue 32): ``logging`` (with ``re``, ``traceback``, ``threading``), ``typing``,
``dataclasses`` (with ``inspect``), ``json``, ``socket``, ``signal``'s enums, ``pkgutil`` and structlog come in
only when the rank needs them (a record written, a warning shown, a failure, torch imported).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.launch

# Loaded by the script's own first line (sys is built in): what was imported before it ran.
SHOW = "import sys; print('MODULES', ' '.join(sorted(sys.modules)))\n"
NOT_AT_START = {
    "logging",
    "typing",
    "dataclasses",
    "inspect",
    "re",
    "json",
    "traceback",
    "threading",
    "socket",
    "enum",
    "signal",
    "pkgutil",
    "difflib",
    "importlib.abc",
    "importlib.resources",
    "structlog",
    "orjson",
    "torch",
    "dslaunch.logs.routing",
    "dslaunch.bootstrap.engine",
}


def _modules(text: str) -> set[str]:
    lines = [line for line in text.splitlines() if "MODULES " in line]
    assert len(lines) == 1, text[-2000:]
    return set(lines[0].split("MODULES ", 1)[1].split())


def test_a_trivial_rank_imports_nothing_heavy_before_its_script(tmp_path: Path) -> None:
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSLAUNCH_")}
    bare = subprocess.run([sys.executable, "-u", str(script)], capture_output=True, text=True, env=env, timeout=60)
    proc = run_cli(["--nproc-per-node", "1", "--master-port", "0", str(script)], env={"DSLAUNCH_LOG_LEVEL": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    extra = _modules(proc.stdout) - _modules(bare.stdout)
    assert "dslaunch.bootstrap.run" in extra  # the bootstrap ran the script
    assert sorted(extra & NOT_AT_START) == []


def test_a_warning_before_logging_is_imported_is_still_routed(tmp_path: Path) -> None:
    """The first warning imports logging, which routes it: shown as ``py:warnings``, never Python's own way."""
    script = tmp_path / "warn.py"
    script.write_text(
        "import sys, warnings\nassert 'logging' not in sys.modules\nwarnings.warn('early bird')\n"
        "print('routed', warnings.showwarning.__module__)\n"
    )
    proc = run_cli(["--nproc-per-node", "1", "--master-port", "0", str(script)], env={"DSLAUNCH_LOG_LEVEL": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "routed logging" in proc.stdout
    warned = [line for line in proc.stderr.splitlines() if "early bird" in line]
    assert warned and " W " in warned[0] and "py:warnings: " in warned[0], proc.stderr


@pytest.mark.parametrize("spec", ["py:warnings=off", "error"])
def test_the_level_still_silences_an_early_warning(tmp_path: Path, spec: str) -> None:
    script = tmp_path / "warn.py"
    script.write_text("import warnings\nwarnings.warn('early bird')\nprint('done')\n")
    args = ["--nproc-per-node", "1", "--master-port", "0", "--log-level", spec, str(script)]
    proc = run_cli(args, env={"DSLAUNCH_LOG_LEVEL": ""})
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout + proc.stderr
    assert "early bird" not in proc.stderr
