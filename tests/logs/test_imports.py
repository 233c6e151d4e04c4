"""Importing the logger stays cheap: no torch, no builder; structlog only once a JSON record is written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.launch


def modules_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "DSLAUNCH_LOG_LEVEL": "warning"},
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def top(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


@pytest.mark.parametrize(
    "code",
    [
        "import dslaunch",
        "import dslaunch.logs",
        "from dslaunch.logs import get_logger; get_logger('user').debug('x'); get_logger('comm').warning('w')",
        "import dslaunch; dslaunch.get_logger('user.trainer').info('x')",
        "from dslaunch.logs import comm_record, timers_report",
    ],
)
def test_logger_import_is_free_of_torch_builder_and_structlog(code: str) -> None:
    mods = modules_after(code)
    assert not top(mods) & {"torch", "numpy", "paramiko", "structlog"}, sorted(top(mods) & {"torch", "structlog"})
    assert not any(m.startswith(("dslaunch.builder", "dslaunch.bootstrap.engine", "dslaunch.mesh")) for m in mods)


def test_structlog_renders_json_records_and_still_no_torch() -> None:
    code = (
        "from dslaunch.logs import configure, get_logger\nconfigure('info', fmt='json')\nget_logger('user').info('x')"
    )
    mods = top(modules_after(code))
    assert "structlog" in mods and "torch" not in mods


def test_configure_is_not_done_at_import_and_root_is_untouched() -> None:
    code = (
        "import logging, dslaunch.logs, dslaunch.logs._core as c\nassert not c.state().configured\n"
        "dslaunch.logs.get_logger('user').warning('w')\nassert c.state().configured\n"
        "assert logging.getLogger().handlers == [] and logging.getLogger().level == logging.WARNING\n"
    )
    modules_after(code)
