"""Suite-wide set-up: tests start their own jobs, so a surrounding Slurm job must not leak in."""

from __future__ import annotations

import os

# Inside salloc/sbatch, `--launcher auto` would (rightly) choose Slurm for every launch test.
for _name in [n for n in os.environ if n.startswith("SLURM_")]:
    del os.environ[_name]
