"""The rank side of stacks on demand and hang detection (docs/hangs.md): stdlib only, cheap, never raises.

The node agent gives each rank a small file, ``DSLAUNCH_PROGRESS_FILE``, of three little-endian 64-bit words:

- ``BEATS``: how many times the rank called :func:`beat` (``dslaunch.heartbeat()``, ``engine.timers.step()``):
  one ``pwrite`` each, which the agent polls;
- ``STARTED``: 1 once the bootstrap has registered the SIGQUIT stack printer (before that, SIGQUIT's default
  action would kill the rank, so the agent does not send it);
- ``REQUEST``: bumped by the agent on each stacks request; with ``DSLAUNCH_NCCL_TRACE_FILE`` set (a
  ``--hang-timeout`` job), a daemon thread of the engine's answers it with torch's NCCL flight recorder dump:
  a signal handler would not run while the main thread waits in a collective;
- ``NCCL``: 1 once the engine's process group uses NCCL (the agent then names the dump in its report).
"""

from __future__ import annotations

import os
import sys
import time

from dslaunch.oslib.owner_only import private_open

ENV = "DSLAUNCH_PROGRESS_FILE"
TRACE_ENV = "DSLAUNCH_NCCL_TRACE_FILE"
BEATS, STARTED, REQUEST, NCCL = 0, 8, 16, 24
SIZE = 32
_POLL = 0.25  # how often the trace thread looks for a request

_fd: int | None = None
_opened = False
_beats = 0


def _file() -> int | None:
    global _fd, _opened
    if not _opened:
        _opened = True
        path = os.environ.get(ENV)
        if path:
            try:
                _fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                _fd = None
    return _fd


def read_word(fd: int, offset: int) -> int:
    try:
        data = os.pread(fd, 8, offset)
    except OSError:
        return 0
    return int.from_bytes(data, "little") if len(data) == 8 else 0


def write_word(fd: int, offset: int, value: int) -> None:
    try:
        os.pwrite(fd, (value & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "little"), offset)
    except OSError:
        pass


def install() -> None:
    """At bootstrap start: SIGQUIT prints every thread's Python stack on stderr, and the rank goes on."""
    import faulthandler
    import importlib

    try:
        sigquit = importlib.import_module("_signal").SIGQUIT  # signal's is an IntEnum: enum's import spared
        faulthandler.register(sigquit, file=sys.stderr, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, RuntimeError):  # no SIGQUIT, or no usable stderr
        return
    fd = _file()
    if fd is not None:
        write_word(fd, STARTED, 1)


def beat() -> None:
    """This rank made progress (``dslaunch.heartbeat()``); a no-op outside dslaunch."""
    global _beats
    fd = _file()
    if fd is None:
        return
    _beats += 1
    write_word(fd, BEATS, _beats)


def engine_ready(backend: str) -> None:
    """The engine's process group is up: that is progress (the end of start-up for --hang-timeout); under
    --hang-timeout and NCCL, each stacks request is answered with the flight recorder's dump from now on."""
    beat()
    path = os.environ.get(TRACE_ENV)
    fd = _file()
    if not path or fd is None or "nccl" not in backend:
        return
    write_word(fd, NCCL, 1)
    seen = read_word(fd, REQUEST)
    import threading  # only for this thread: a rank's start-up spares the import

    threading.Thread(target=_watch, args=(fd, seen, path, backend), name="dslaunch-trace", daemon=True).start()


def _watch(fd: int, seen: int, path: str, backend: str) -> None:
    while True:
        time.sleep(_POLL)
        now = read_word(fd, REQUEST)
        if now != seen:
            seen = now
            _dump(path, backend)


def _dump(path: str, backend: str) -> None:
    try:
        import torch._C._distributed_c10d as c10d

        dump = getattr(c10d, "_dump_nccl_trace", None)
        if dump is None:
            message = f"dslaunch: no NCCL flight recorder trace: this torch has none (backend {backend})"
        else:
            data = dump()
            with private_open(path, "wb") as f:
                f.write(data)
            message = f"dslaunch: NCCL flight recorder trace written to {path}"
    except Exception as exc:  # noqa: BLE001 - a diagnostic must never take the rank down
        message = f"dslaunch: NCCL flight recorder trace failed: {exc}"
    try:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
