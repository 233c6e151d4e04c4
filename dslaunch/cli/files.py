"""Reading a file named by an option, with errors that name the option (exit 2)."""

from __future__ import annotations

import click


def read_option_file(path: str, what: str, param_hint: str, *, required: bool) -> str | None:
    """The file's text; None when it is missing and not ``required``."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        if required:
            raise click.BadParameter(f"{what} {path!r} does not exist", param_hint=param_hint) from None
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {what} {path!r}: {exc}", param_hint=param_hint) from None
