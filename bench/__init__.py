"""Benchmarks and stress runs; each docstring says how to run it (``python -m bench.NAME`` when it uses testbeds)."""
