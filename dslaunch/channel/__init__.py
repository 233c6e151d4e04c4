"""A job's control channels, for every transport, below all their users (stdlib only): the pods' launchers joining
their coordinator (``pods/``), the Slurm tasks' stop channel (``runners/slurm/stop_channel.py``) and a pdsh or MPI
job agent dialling back to its launcher (``agent/dialback_client.py``, ``runners/remote/agent_links.py``).

- ``handshake``: the HMAC hello, challenge and response both ways, a refusal, and each line's keys after it (pure).
- ``line_reader``: one bounded handshake line off a socket, before a deadline.
- ``event_loop``: one thread serving many sockets: a selector, a timer heap, calls handed in from other threads.
- ``door``: who gets as far as the handshake, at what cost: a flood never keeps a real peer out (on a loop).
- ``admit``: the server's last step for a peer it takes (the welcome, and the link) or does not (why).
- ``link``: one authenticated connection on threads of its own: bounded, MACed lines, heartbeats, silence detection.
- ``loop_link``: the same on an event loop: a bounded write buffer, heartbeats and silence on a wheel.
- ``dial``: the client's side: connect, the handshake, and retries with backoff and jitter within a bound.
- ``secret``: the job's shared secret of the pods and the Slurm tasks.
"""
