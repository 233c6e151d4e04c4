"""The ssh runner (paramiko): ``runner`` starts an agent per host for an attempt, ``live`` keeps one per host
for the job (with restarts)."""
