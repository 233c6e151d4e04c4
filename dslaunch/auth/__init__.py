"""The challenge and response that lets only a job's own processes onto its control channels (stdlib only):
the pods' launchers joining their coordinator (``pods/``) and a pdsh job agent dialling back to its launcher
(``agent/dialback_client.py``, ``runners/pdsh/dialback.py``). Below both the node agent and the pods.

- ``handshake``: the HMAC challenge and response both ways (pure).
- ``line_reader``: one bounded handshake line off a socket, before a deadline.
"""
