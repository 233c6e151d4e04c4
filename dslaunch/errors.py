"""One base for user errors: a bad option, file or environment, never a bug.

Parsers raise subclasses of :class:`DslaunchError`; the CLI turns every one into a
one-line message and exit 2 (``dslaunch.cli.command``), the rank bootstrap into a
one-line message and exit 2 as well. ``option`` names the option to blame, if any.
The one check for a bug is :func:`assert_never`: a ``match`` that misses a case.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing itself is not imported at run time (a rank's start-up)
if TYPE_CHECKING:
    from typing import NoReturn


class DslaunchError(ValueError):
    def __init__(self, message: str, *, option: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.option = option


def assert_never(value: NoReturn) -> NoReturn:
    """The ``case _:`` of a ``match`` over a union (the supervision shells' actions): mypy refuses the call while a
    member of the union has no case of its own, and one that slips through fails here, never silently.
    (``typing.assert_never`` is Python 3.11's; dslaunch runs on 3.10.)"""
    raise AssertionError(f"unhandled: {value!r}")
