"""Folders and files only their owner can read or write, whatever the umask: the logs under ``--log-dir`` (they
hold exported variables' names, tracebacks, paths) and the pages made from them. Stdlib only.

The modes are at most 0700 for a folder and 0600 for a file, and never more than the umask allows; folders
and files that already exist are left as they are.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from typing import IO, Any

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: str) -> None:
    """Make ``path`` and each missing folder above it with :data:`DIR_MODE` (``os.makedirs`` gives the parents
    the umask's default instead)."""
    path = os.path.abspath(path)
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:
            if not os.path.isdir(folder):
                raise


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, FILE_MODE)


def private_open(path: str, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """``open(path, mode, **kwargs)``, but a file it creates gets :data:`FILE_MODE`; ``.name`` stays ``path``."""
    return open(path, mode, opener=_private, **kwargs)
