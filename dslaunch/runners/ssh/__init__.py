"""The ssh runner (paramiko): ``runner`` starts an agent per host for an attempt; with restarts, ``channel_agent`` keeps
one per host for the job, on its channel (runners/remote/ holds what that shares with pdsh); ``connect`` opens the
connections."""
