"""Slurm's pure side (apart from its runner, ``dslaunch/runners/slurm/``): ``hostlist``, ``layout`` (the task
layout of a step, port derivation), ``address``, ``srun`` (srun lines), ``task_plan`` (which node of the plan an
srun task is, the step's port) and ``lost_nodes`` (the nodes srun's error lines blame).

Everything here is pure and imports nothing heavy; the CLI area (``dslaunch.cli.slurm_hosts``), the rank's
``bootstrap.env`` and the Slurm runner put it to work.
"""
