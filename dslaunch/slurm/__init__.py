"""Slurm support: hostlists, the task layout of a step, port derivation and srun lines.

Everything here is pure and imports nothing heavy; the CLI area
(``dslaunch.cli.slurm_hosts``) and the runners (``dslaunch.runners.slurm.runner``,
``dslaunch.runners.slurm.in_step``, and ``python -m dslaunch.runners.slurm.task``, what each
task of the runner's srun step runs) put it to work.
"""
