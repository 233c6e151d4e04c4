"""Seeing a running job (docs/observability.md): each rank's timer windows, the job-wide breakdown, stragglers,
metrics. ``record`` crosses rank -> agent; ``breakdown`` and ``stragglers`` are pure; ``session`` is the launcher's
seam; ``metrics`` imports prometheus-client, only when asked for."""
