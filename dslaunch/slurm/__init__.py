"""Slurm support: hostlists, the task layout of a step, port derivation and srun lines.

Everything here is pure and imports nothing heavy; the CLI area
(``dslaunch.cli.slurm_options``) and the runner (``dslaunch.runners.slurm``)
put it to work.
"""
