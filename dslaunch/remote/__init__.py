"""Remote launches: ssh settings, the remote agent command, exported environment, preflight.

Nothing here imports paramiko at module level: the CLI imports these modules.
"""
