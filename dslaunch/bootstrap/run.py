"""Run TARGET as __main__ with the right sys.argv and sys.path; record a crash (``python -m dslaunch.bootstrap``,
or the zygote's forked rank)."""

from __future__ import annotations

import importlib.util
import io
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
            _run_path(target)
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


def _run_path(target: str) -> None:
    """``runpy.run_path(target, run_name="__main__")``, the same steps without importing ``pkgutil`` for a script
    file: ``pkgutil`` registers a ``singledispatch`` function, which imports ``typing`` (about 10 ms of CPU a rank).
    A zip or a directory, or a Python without runpy's helper, goes through ``run_path`` itself."""
    run_code = getattr(runpy, "_run_module_code", None)
    if run_code is None or _importer(target) is not None:
        runpy.run_path(target, run_name="__main__")
        return
    with io.open_code(os.path.abspath(target)) as f:  # runpy's _get_code_from_file: a compiled file, else source
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:
        import marshal

        code = marshal.loads(data[16:])
    else:
        code = compile(data, target, "exec")
    run_code(code, None, "__main__", pkg_name="", script_name=target)


def _importer(path: str) -> object:
    """``pkgutil.get_importer(path)``: the path hook that takes ``path`` (a zip, a directory), else None."""
    if path in sys.path_importer_cache:
        return sys.path_importer_cache[path]
    for path_hook in sys.path_hooks:
        try:
            importer = path_hook(path)
        except ImportError:
            continue
        sys.path_importer_cache.setdefault(path, importer)
        return importer
    return None


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
