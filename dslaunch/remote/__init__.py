"""Remote launches: ssh settings, the remote agent command, exported environment, the preflight probe.

Nothing here imports paramiko at module level: the CLI imports these modules.
"""
