"""Dev-only test beds, shared by tests/ and bench/ (never installed: pyproject packages only ``dslaunch*``).

- :mod:`testbeds.ssh_cluster`: one real sshd on loopback addresses (127.0.0.2-5), private keys and config;
- :mod:`testbeds.netns_cluster`: two "hosts" as network namespaces on a private bridge, an sshd in each;
- :mod:`testbeds.slurm_cluster`: a private 2-node Slurm cluster on one host (munged, slurmctld, two slurmd).

Import them from the repository root: pytest puts it on the path (``pythonpath = ["."]``); bench scripts
run as ``python -m bench.NAME``.
"""
