"""Many loopback "hosts" (32 to 256) for scale tests and benchmarks: ``ssh_cluster``'s sshd, one per 16 addresses.

Every address is in 127.0.0.0/8 (all loopback on Linux), in a block of its own (``127.B.x.y``) so a scale bed never
shares an address with the default 4-host bed (127.0.0.2-5) or ``bench_remote`` (127.0.1.x).
"""

from __future__ import annotations

from testbeds.ssh_cluster import SshCluster, start_cluster

PER_OCTET = 250  # host numbers 1..250 in the last octet: never .0 or .255
# A rank as cheap as a rank gets: its start time in $STAMPS; rank $FAIL_RANK exits 3 once every rank has started
# (its exit time in $STAMPS/fail); with $HOLD the others sleep that long, to be stopped.
RANK_SH = """#!/bin/sh
date +%s.%N > "$STAMPS/.start.$RANK" && mv "$STAMPS/.start.$RANK" "$STAMPS/start.$RANK"
if [ "$RANK" = "${FAIL_RANK:-none}" ]; then
    while [ "$(ls "$STAMPS" | grep -c '^start\\.')" -lt "$WORLD_SIZE" ]; do sleep 0.05; done
    date +%s.%N > "$STAMPS/fail"
    exit 3
fi
[ -n "$HOLD" ] && exec sleep "$HOLD"
exit 0
"""


def scale_addrs(count: int, block: int) -> tuple[str, ...]:
    """``count`` loopback addresses ``127.block.x.y``, x from 0, y from 1."""
    if not 1 <= block <= 254 or not 1 <= count <= 256 * PER_OCTET:
        raise ValueError(f"no {count} loopback addresses in block {block}")
    return tuple(f"127.{block}.{i // PER_OCTET}.{i % PER_OCTET + 1}" for i in range(count))


def start_scale_cluster(count: int, block: int = 10) -> SshCluster:
    """sshd on ``count`` loopback addresses, aliases node1..nodeN in its ssh config and known_hosts.

    Its sessions get a home of their own (sshd's ``SetEnv HOME``): every "host" here shares this machine's home,
    so one ``~/.bashrc`` for all, and where that runs ``pyenv init`` (this machine's root), each session's
    ``pyenv rehash`` waits for the others' lock, serialising the N sessions a scale run starts at once (64
    ``ssh HOST true`` took 18 s, one ``source ~/.bashrc`` 15 s meanwhile; 5.5 s with a home of their own). Real
    hosts each have their own home. The staged plans (pdsh) and the agents' pid files go to that home.
    """
    return start_cluster(scale_addrs(count, block), own_home=True)
