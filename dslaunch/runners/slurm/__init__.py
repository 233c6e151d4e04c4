"""The Slurm runner: srun from an allocation, and what runs inside each srun task."""
