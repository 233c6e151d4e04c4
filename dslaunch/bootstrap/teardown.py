"""End a rank's torch.distributed while the interpreter is still whole.

Why (docs/teardown.md has the backtrace): a gloo worker thread (``pt_gloo_runloop``) drops
its last reference to a finished collective *after* ``wait()`` has returned to Python. If
that work holds a tensor whose Python object C++ now owns, the drop needs the GIL. Once
``Py_FinalizeEx`` has started, taking the GIL makes the thread ``pthread_exit``; the forced
unwind meets a ``noexcept`` destructor and libstdc++ calls ``std::terminate``: SIGABRT,
exit 134, after the script finished cleanly.

The cure is to have no gloo worker left when finalisation starts. ``_finish_at_exit`` runs as the
last atexit handler (the interpreter is whole, user handlers have run): it destroys every
process group, drops the references dslaunch holds and collects garbage (shutdown.py), so each
ProcessGroupGloo destructor joins its workers, which drains their queues. If user
objects still hold a group (a module-level model, Megatron-style globals), its workers
stay; the rank then ends with ``os._exit`` after flushing its open files, skipping only
the finalisation in which those threads would abort.

:func:`end_rank` is how every bootstrap rank ends (docs/teardown.md, "A rank's end"): it runs what the
interpreter's exit runs before finalisation (non-daemon threads joined, every atexit handler, this one last),
saves open files, then ``os._exit``: tearing down torch's modules would cost about a second a rank, for nothing.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

from dslaunch.bootstrap import open_files, shutdown

# threading, traceback and typing are imported only when used: every rank imports this module at start-up
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

FINALIZE_ENV = "DSLAUNCH_RANK_FINALIZE"  # "1": ranks end with full finalisation (leak checkers, debuggers)

_state: dict[str, object] = {"code": 0}


def install() -> None:
    """Register :func:`_finish_at_exit` before user code runs, so it is the last atexit handler."""
    if not shutdown.ended_at_exit():
        shutdown.end_at_exit()
        atexit.register(_finish_at_exit)


def set_exit_code(code: object) -> None:
    """The status the process will exit with, as ``SystemExit.code`` gives it."""
    _state["code"] = exit_status(code)


def exit_status(code: object) -> int:
    """The process exit status Python derives from ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return int(code) & 0xFF
    return 1  # a message: Python prints it and exits 1


def _finish_at_exit() -> None:
    left = _shutdown_distributed()
    if left:
        open_files.save()
        os._exit(int(_state["code"]))  # type: ignore[call-overload]


def _shutdown_distributed() -> list[int]:
    """Every process group destroyed (shutdown.py), the engine's included; the gloo workers left alive."""
    if sys.modules.get("torch.distributed") is None:
        return []  # no group, and no engine: nothing to import at exit
    from dslaunch.bootstrap import engine  # found only now, at exit: the bootstrap imports this module before torch

    return shutdown.shutdown_distributed(engine.current(), engine.release, destroy_adopted=True)


def end_rank(code: object) -> NoReturn:
    """End the process as ``raise SystemExit(code)`` would, without finalising the interpreter (unless
    ``DSLAUNCH_RANK_FINALIZE=1``): what finalisation runs first and what it flushes happen here, in its order."""
    set_exit_code(code)
    if os.environ.get(FINALIZE_ENV) == "1":
        raise SystemExit(code)
    status = int(_state["code"])  # type: ignore[call-overload]
    try:
        if not (code is None or isinstance(code, int)):
            _guarded(lambda: print(code, file=sys.stderr))  # SystemExit("message"): Python prints it, exits 1
        _guarded(_join_threads)
        _guarded(atexit._run_exitfuncs)  # the script's, logging's, multiprocessing's, weakref.finalize's; ours last
        if not shutdown.collected():
            _guarded(gc.collect)  # cyclic garbage: its __del__ and its files' close run, as at finalisation
        if not open_files.save() and status == 0:
            status = 120  # as Python, when stdout cannot be flushed at exit
    finally:  # a Ctrl-C at any point still ends the rank here, with its status
        os._exit(status)


def _join_threads() -> None:
    """Wait for non-daemon threads and run ``threading``'s exit hooks (concurrent.futures), as finalisation does
    first. No ``threading`` imported, no thread of its making (nor hook) to wait for."""
    threading = sys.modules.get("threading")
    join_threads = getattr(threading, "_shutdown", None)
    if join_threads is not None:
        join_threads()


def _guarded(step: Callable[[], object]) -> None:
    """Run one step of the end; an exception in it (a Ctrl-C while joining threads) is reported, as finalisation
    reports it, and the next step still runs."""
    try:
        step()
    except BaseException:  # noqa: BLE001
        try:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - stderr itself is gone
            pass
