"""One job across pods (one launcher per node, as Kubernetes runs torchrun): the control channel between
the launchers of a job's pods (docs/kubernetes.md).

- ``secret``: the job's shared secret (``DSLAUNCH_JOB_SECRET`` or a file), and the one warning without it.
- ``messages``: what the pods say to each other, each field checked (the handshake, door and link: ``channel/``).
- ``coordinator``: node rank 0's side: accepts the pods, relays their events, and a handle per pod.
- ``member``: every other pod's side: joins the coordinator, and a handle on it.
"""
