"""Reading the files a user names (hostfile, env files, configs, log records): capped, and never stuck.

Every such file is read through here, so that none can exhaust memory or hang the launcher: a regular file is
read up to :data:`MAX_BYTES`; a pipe (``<(...)``, a named FIFO) up to the same cap and for at most
:data:`PIPE_WAIT_S` seconds without data (a FIFO is opened without waiting for a writer; with none, it reads as
empty); anything else (``/dev/zero``, a terminal, a directory, a socket) is refused unread. Stdlib only.
"""

from __future__ import annotations

import os
import select
import stat
from collections.abc import Iterator

from dslaunch.errors import DslaunchError

MAX_BYTES = 16 << 20  # far above any hostfile, env file or JSON config dslaunch reads
MAX_LINE = 1 << 20  # one record of a log file; longer lines are not dslaunch's records
PIPE_WAIT_S = 10.0  # the longest a pipe may go silent before the launcher gives up on it
_CHUNK = 1 << 16


class UserFileError(DslaunchError):
    """A file that is not a readable size or kind; the message names the file and the limit."""


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def _kind(mode: int) -> str | None:
    """Why a file of this mode is not read (None: it is read)."""
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a file (dslaunch reads regular files and pipes)"
    return "is not a regular file or a pipe"


def read_bytes(path: str, what: str, *, cap: int = MAX_BYTES, option: str | None = None) -> bytes:
    """At most ``cap`` bytes of ``path``, else a :class:`UserFileError` (``what`` names the file in it, e.g.
    ``hostfile``); ``OSError`` (missing, not permitted) is left to the caller to word."""
    _check_kind(os.stat(path).st_mode, path, what, option)  # a device is never opened
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait for a writer
    try:
        found = os.fstat(fd)
        _check_kind(found.st_mode, path, what, option)  # replaced since the stat
        too_big = UserFileError(f"{what} {path!r} is larger than {_size(cap)}, the most dslaunch reads", option=option)
        if stat.S_ISREG(found.st_mode):
            if found.st_size > cap:
                raise too_big
            os.set_blocking(fd, True)
            data = _read_file(fd, cap + 1)
        else:
            data = _read_pipe(fd, cap + 1, f"{what} {path!r}", option)
    finally:
        os.close(fd)
    if len(data) > cap:  # grew while read, or a pipe
        raise too_big
    return data


def check_readable(path: str, what: str, *, cap: int = MAX_BYTES, option: str | None = None) -> None:
    """What :func:`read_bytes` refuses, checked without reading, for a file another reader opens later."""
    found = os.stat(path)
    _check_kind(found.st_mode, path, what, option)
    if stat.S_ISREG(found.st_mode) and found.st_size > cap:
        raise UserFileError(f"{what} {path!r} is larger than {_size(cap)}, the most dslaunch reads", option=option)


def _check_kind(mode: int, path: str, what: str, option: str | None) -> None:
    why = _kind(mode)
    if why is not None:
        raise UserFileError(f"{what} {path!r} {why}", option=option)


def read_text(path: str, what: str, *, cap: int = MAX_BYTES, option: str | None = None) -> str:
    """:func:`read_bytes` as UTF-8 text."""
    data = read_bytes(path, what, cap=cap, option=option)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserFileError(f"{what} {path!r} is not UTF-8 text (byte {exc.start})", option=option) from None


def _read_file(fd: int, most: int) -> bytes:
    chunks, got = [], 0
    while got < most:
        chunk = os.read(fd, min(_CHUNK, most - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_pipe(fd: int, most: int, named: str, option: str | None) -> bytes:
    """Read first, wait only when a writer has sent nothing yet: a FIFO that no writer holds open reads as its
    end at once (select would report nothing on a FIFO that never had a writer)."""
    chunks, got = [], 0
    while got < most:
        try:
            chunk = os.read(fd, min(_CHUNK, most - got))
        except BlockingIOError:
            ready, _, _ = select.select([fd], [], [], PIPE_WAIT_S)
            if not ready:
                raise UserFileError(
                    f"{named} is a pipe that sent nothing for {PIPE_WAIT_S:g} s and did not end", option=option
                ) from None
            continue
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def regular_lines(path: str, *, max_line: int = MAX_LINE) -> Iterator[str]:
    """The lines of ``path`` if it is a regular file (nothing from anything else, nor from a file that cannot be
    opened), as text, bad UTF-8 replaced; a line over ``max_line`` bytes is skipped unread as a whole."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
        f = open(path, "rb")  # closed by the with below, when the lines are done
    except OSError:
        return
    with f:
        skipping = False  # inside a line too long to keep
        while line := f.readline(max_line + 1):
            whole = line.endswith(b"\n")
            if not skipping and (whole or len(line) <= max_line):
                yield line.decode("utf-8", "replace")
            skipping = not whole
