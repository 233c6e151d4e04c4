"""What one heartbeat costs the pods' coordinator on loopback TCP (docs/scale.md, "Why the misses"): a sealed line
sent on each of N connections, then each read and its MAC checked, in CPU time (user and system) per line.

    python -m bench.bench_loopback_send [--connections 4000] [--rounds 5]

On loopback the kernel does the receiving socket's TCP work in the sender's process, so a send's system time here
holds what a network would put on the receiving host.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket

from dslaunch.channel.link import Sealer

HB = b'{"t":"hb"}'


def _cpu() -> tuple[float, float]:
    t = os.times()
    return t.user, t.system


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--connections", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, rounds = args.connections, args.rounds
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 2 * n + 64)), hard))
    with socket.create_server(("127.0.0.1", 0), backlog=n) as server:
        port = server.getsockname()[1]
        pairs = []
        for _ in range(n):
            client = socket.create_connection(("127.0.0.1", port))
            accepted, _addr = server.accept()
            pairs.append((accepted, client))
    seal = [Sealer(b"k" * 32) for _ in range(n)]
    check = [Sealer(b"k" * 32) for _ in range(n)]
    user, system = _cpu()
    for _ in range(rounds):
        for i, (here, _there) in enumerate(pairs):
            here.send(seal[i].seal(HB))
    sent = _cpu()
    lines = 0
    for i, (_here, there) in enumerate(pairs):  # every round's lines wait in each socket: one read each
        for line in there.recv(1 << 16).split(b"\n")[:-1]:
            lines += check[i].open(line) is not None
    read = _cpu()
    per = 1e6 / (n * rounds)
    print(f"{n} loopback connections, {rounds} lines each")
    print(f"seal + send: {(sent[0] - user) * per:.1f} us user, {(sent[1] - system) * per:.1f} us system a line")
    print(f"read + check ({rounds} lines a read): {(read[0] - sent[0]) * per:.1f} us user, "
          f"{(read[1] - sent[1]) * per:.1f} us system a line; {lines} of {n * rounds} checked")  # fmt: skip
    for here, there in pairs:
        here.close()
        there.close()


if __name__ == "__main__":
    main()
