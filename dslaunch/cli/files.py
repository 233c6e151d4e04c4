"""Reading a file named by an option, with errors that name the option (exit 2)."""

from __future__ import annotations

from dslaunch.errors import DslaunchError
from dslaunch.inputs import userfiles


def read_option_file(path: str, what: str, option: str, *, required: bool) -> str | None:
    """The file's text (capped: :mod:`dslaunch.inputs.userfiles`); None when it is missing and not ``required``."""
    try:
        return userfiles.read_text(path, what, option=option)
    except FileNotFoundError:
        if required:
            raise DslaunchError(f"{what} {path!r} does not exist", option=option) from None
        return None
    except OSError as exc:
        raise DslaunchError(f"cannot read {what} {path!r}: {exc.strerror or exc}", option=option) from None
