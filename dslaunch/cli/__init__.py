"""The ``dslaunch`` command line. Importing this never imports torch or paramiko."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    from dslaunch.cli.command import build_command

    build_command().main(args=argv, prog_name="dslaunch")
