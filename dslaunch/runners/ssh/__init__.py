"""The ssh runner (paramiko): ``runner`` starts an agent per host for an attempt; with restarts, ``live`` keeps
one per host for the job and ``spares`` one on each spare host; ``connect`` opens the connections."""
