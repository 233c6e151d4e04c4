"""Save what interpreter finalisation would have written, for a rank that ends with ``os._exit`` (stdlib only).

Finalisation flushes ``sys.stdout``/``sys.stderr`` and, as it frees every object, closes each file object still
open (``IOBase.__del__``); ``exit()`` then flushes C's stdio buffers. ``os._exit`` does none of that, so
:func:`save` does it by hand: every live file object is flushed, those of Python-level classes (gzip, bz2, lzma,
a user's ``io`` subclass: their ``close`` may write a trailer) are then closed, and the plain ``_io`` files
under them flushed again. Plain ``_io`` files are not closed: their data is on its way once flushed, the kernel
closes the descriptors, and a daemon thread still using one gets no "closed file" error in its last moments.

A forked rank starts with everything the zygote imported; :func:`freeze_startup` moves those objects out of the
collector's sight (``gc.freeze()``, as the gc docs advise for pre-fork servers), so the collections at the end
and this module's search for files walk only what the script made: about 0.2 CPU-s a rank less with torch.
"""

from __future__ import annotations

import _io  # the C base every file object derives from, io.IOBase's too: a plain type, no ABC lookup per class
import fcntl
import gc
import os
import sys

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_state = {"frozen_writers": False}


def freeze_startup() -> None:
    """Freeze what exists before the script runs. A file object among it can only hold unsaved data if a
    descriptor beyond stdio was open for writing then; :func:`save` then unfreezes and searches everything."""
    _state["frozen_writers"] = writable_fds_beyond_stdio()
    gc.freeze()


def writable_fds_beyond_stdio() -> bool:
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return True  # cannot tell: assume there are
    for fd in fds:
        if fd > 2:
            try:
                if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                    return True
            except OSError:
                continue  # listdir's own descriptor, closed since
    return False


def save() -> bool:
    """Flush stdio and every open file object, close the Python-level ones, flush C stdio; False when
    ``sys.stdout`` or ``sys.stderr`` could not be flushed (Python then exits 120)."""
    stdio_ok = flush_stdio()
    if _state["frozen_writers"]:
        gc.unfreeze()
    files = open_file_objects()
    for f in files:
        _quietly(f.flush)
    std = {id(s) for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__)}
    for f in files:
        if type(f).__module__ != "_io" and id(f) not in std:
            _quietly(f.close)
    for f in files:
        if type(f).__module__ == "_io":
            _quietly(f.flush)  # what a closed wrapper wrote into a file it did not own (GzipFile(fileobj=...))
    stdio_ok = flush_stdio() and stdio_ok
    flush_c_stdio()
    return stdio_ok


def flush_stdio() -> bool:
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except ValueError:
            pass  # closed by the script: nothing left to write, and Python does not count it a failure
        except Exception:  # noqa: BLE001 - EPIPE, a full disk, a broken replacement object: as Python, report it
            ok = False
    return ok


def open_file_objects() -> list[Any]:
    """Every live file object that is not closed (``gc.get_objects()``: they are all tracked)."""
    objects = gc.get_objects()
    kinds = {kind for kind in {type(obj) for obj in objects} if issubclass(kind, _io._IOBase)}
    found = []
    for obj in objects:
        if type(obj) in kinds:  # type(), not isinstance: some objects warn on __class__
            try:
                if not obj.closed:
                    found.append(obj)
            except Exception:  # noqa: BLE001 - a half-built or broken file object: nothing to save
                continue
    return found


def flush_c_stdio() -> None:
    """``fflush(NULL)``: what native code printed through C's buffered ``stdout`` (a pipe here) or a ``FILE*``."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no ctypes or no libc symbol: nothing more can be done
        pass


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except Exception:  # noqa: BLE001 - closed meanwhile, EPIPE, a full disk: finalisation ignores these too
        pass
