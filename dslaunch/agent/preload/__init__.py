"""``--preload``: the zygote that imports modules once per node, and warm restarts."""
