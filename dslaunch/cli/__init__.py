"""The ``dslaunch`` command line. Importing this never imports torch or paramiko."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    import os

    if os.environ.get("SLURM_STEP_ID") or os.environ.get("SLURM_STEPID"):  # srun dslaunch: hear failed peers at once
        from dslaunch.runners.slurm.peer_signal import listen_in_step

        listen_in_step()
    from dslaunch.cli.command import build_command

    build_command().main(args=argv, prog_name="dslaunch")
