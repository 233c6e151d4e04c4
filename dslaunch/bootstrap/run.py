"""Run TARGET as __main__ with the right sys.argv and sys.path; record a crash (``python -m dslaunch.bootstrap``,
or the zygote's forked rank)."""

from __future__ import annotations

import os
import runpy
import sys

from dslaunch.bootstrap import open_files, progress, teardown
from dslaunch.bootstrap.failure_file import user_traceback, write_error_file
from dslaunch.logs import phases

_SKIP = ("runpy.py", os.path.join("dslaunch", "bootstrap", "run.py"), "<frozen runpy>")


def main(argv: list[str]) -> None:
    open_files.freeze_startup()  # a forked rank's preloaded modules: out of the collector's sight (open_files.py)
    phases.begin()
    module = bool(argv) and argv[0] == "-m"
    if module:
        argv = argv[1:]
    if not argv:
        print("usage: python -m dslaunch.bootstrap [-m] TARGET [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    target, args = argv[0], argv[1:]
    progress.install()
    _setup_logging()
    phases.rank_started()
    teardown.install()
    teardown.end_rank(_run(target, args, module))  # no return: atexit, flushes, then os._exit (docs/teardown.md)


def _run(target: str, args: list[str], module: bool) -> object:
    """Run the script; return what it exits with. Its frames are gone on return, so are its groups' last users."""
    try:
        sys.argv = [target, *args]
        if module:
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):  # no traceback, but when and how it failed: the agent orders root causes by it
            _record(exc, "", exc.code if isinstance(exc.code, int) else 1)
        return exc.code
    except BaseException as exc:  # noqa: BLE001 - every crash is recorded, then re-reported
        text = user_traceback(exc, _SKIP)
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        _record(exc, text, code)
        sys.stderr.write(text)
        sys.stderr.flush()
        return code
    return 0


def _record(exc: BaseException, text: str, code: int) -> None:
    path = os.environ.get("DSLAUNCH_ERROR_FILE")
    if path:
        write_error_file(path, exc, text, code)


def _setup_logging() -> None:
    """Configure this rank's logging from the launcher's DSLAUNCH_LOG_* before the user script runs."""
    from dslaunch.logs import setup_rank

    try:
        setup_rank()
    except ValueError as exc:
        print(f"dslaunch: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
