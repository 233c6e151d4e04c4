"""The secret test runs over every runner: it needs the Slurm test cluster too."""

from tests.slurm.conftest import slurm_cluster, slurm_env

__all__ = ["slurm_cluster", "slurm_env"]
