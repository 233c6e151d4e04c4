"""The CLI and the node agent start without torch or paramiko (click's import-allowlist idea)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "paramiko", "numpy")


def imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    import json

    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize(
    "code",
    [
        "import dslaunch",
        "import dslaunch.cli",
        "from dslaunch.cli.command import build_command; build_command()",
        "import dslaunch.agent.__main__, dslaunch.agent.supervisor",
        "import dslaunch.bootstrap.__main__",
        "from dslaunch.runners import get_runner; get_runner('local')",
    ],
)
def test_no_heavy_imports(code: str) -> None:
    heavy = {m for m in imported_after(code) if m.split(".")[0] in HEAVY}
    assert not heavy, f"{code!r} imports {sorted(heavy)}"


def test_help_runs_without_heavy_imports() -> None:
    code = "import sys\nfrom dslaunch.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    heavy = {m for m in imported_after(code) if m.split(".")[0] in HEAVY}
    assert not heavy
