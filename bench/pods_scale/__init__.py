"""The pods-at-scale simulator's parts (``bench/bench_pods_scale.py`` runs them; docs/scale.md has the figures).

- ``dialects``: how each kind of client speaks and retries (a member pod, a Slurm task, a dial-back agent): the one
  place to change when the client side of ``channel/`` changes;
- ``client``: one simulated client on a non-blocking socket, saying what the real one says, with the project's
  own code (``channel.handshake``, ``channel.link.Sealer``, ``pods.messages``, ``wire``);
- ``worker``: a process that runs thousands of clients on one selectors loop; ``fleet``: the workers, from the
  benchmark's side;
- ``coordinator``: the real coordinator (a ``dslaunch`` launcher as pod 0) and what it costs, from ``/proc``;
- ``scenarios``: the pods' figures; ``servers``: the Slurm stop channel's hub and the dial-back listener, each in
  a process of its own, and their figures.
"""
