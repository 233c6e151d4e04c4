"""Linux helpers: process control, this host's processes, cores, GPUs, owner-only files."""
