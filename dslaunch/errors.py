"""One base for user errors: a bad option, file or environment, never a bug.

Parsers raise subclasses of :class:`DslaunchError`; the CLI turns every one into a
one-line message and exit 2 (``dslaunch.cli.command``), the rank bootstrap into a
one-line message and exit 2 as well. ``option`` names the option to blame, if any.
"""

from __future__ import annotations


class DslaunchError(ValueError):
    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.option = option
