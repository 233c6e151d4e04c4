"""What the ssh and pdsh runners share, in one place: ``base`` (``RemoteRunner``: node 0's free port, reaping a
lost node, start failures, the remote stderr relay, keepalive timing), ``sshconfig`` (ssh settings read once),
``agent_command`` (the remote agent's shell line), ``stage`` (plan files staged on a host), ``rlimits``, ``reap``
(``python -m dslaunch.runners.remote.reap`` on a host), and the job agents (``--max-restarts``: node agents that
live for the job, ``agent/job_agent.py``) whatever carries them: ``job_agents`` (an attempt on one, the job's agents
by host) and ``spares`` (spare hosts standing by). The ssh runner's job agents talk over their channel
(runners/ssh/channel_agent.py), the pdsh runner's over the connection they dial back to the launcher with
(runners/pdsh/dialback.py).

Nothing here imports paramiko at module level: the CLI imports ``sshconfig``.
"""
