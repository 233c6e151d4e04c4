"""What the pods' per-message MAC costs (channel/link.py ``Sealer``): messages per second through one link, and the
launcher's CPU while 64 pods' heartbeats come and go, with and without MACs.

    python bench/bench_pods_mac.py [--messages 20000] [--pods 64] [--seconds 10] [--write docs/benchmarks.md]

Throughput: one thread sends ``--messages`` rank-exit lines (about 300 bytes, as a failed rank's event without its
traceback) on a link over a socket pair, this thread reads them; messages per second from the first send to the
last line read. Heartbeats: ``--pods`` links over socket pairs, each end sending its heartbeat every second (the
coordinator's ends and the pods' ends, all in this process, each with its reader thread, as the coordinator runs
them), for ``--seconds``; the process's CPU time (user + system) over that time, in percent of one core. That
counts both ends, so the coordinator alone costs about half. A script, not a test: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block
from dslaunch import wire
from dslaunch.channel import handshake
from dslaunch.channel.link import Link

KEYS = handshake.session_keys(os.urandom(32), "bench", "a" * 32, "b" * 32)


def _pair(sealed: bool) -> tuple[Link, Link]:
    a, b = socket.socketpair()
    if not sealed:
        return Link(a, "pod"), Link(b, "coordinator")
    return Link(a, "pod", keys=(KEYS[0], KEYS[1])), Link(b, "coordinator", keys=(KEYS[1], KEYS[0]))


def throughput(count: int, sealed: bool) -> float:
    here, there = _pair(sealed)
    line = wire.encode(wire.RankExit(3, 1, 1, "pod-1", 4242, 7, None, time.time(), False, None, ("x" * 120,)))
    data = line.encode()
    began = time.perf_counter()

    def send() -> None:
        for _ in range(count):
            there.send_raw(data)

    threading.Thread(target=send, daemon=True).start()
    got = 0
    for _ in here.lines():
        got += 1
        if got == count:
            break
    took = time.perf_counter() - began
    here.close()
    there.close()
    return count / took


def heartbeats_cpu(pods: int, seconds: float, sealed: bool) -> float:
    links = [end for _ in range(pods) for end in _pair(sealed)]
    for link in links:
        link.start_reader()
        link.start_heartbeats()
    time.sleep(1.5)  # every thread started
    cpu0, wall0 = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    cpu = (time.process_time() - cpu0) / (time.perf_counter() - wall0)
    for link in links:
        link.close()
    return 100 * cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--write", help="put the table in this markdown file (between bench_pods_mac markers)")
    args = parser.parse_args()
    rows = []
    for sealed in (False, True):
        rate = throughput(args.messages, sealed)
        cpu = heartbeats_cpu(args.pods, args.seconds, sealed)
        rows.append((sealed, rate, cpu))
        print(
            f"MACs {'on ' if sealed else 'off'}: {rate:,.0f} messages/s; {args.pods} pods' heartbeats: {cpu:.1f} % CPU"
        )
    lines = [
        f"| MACs | messages/s, one link | CPU at {args.pods} pods' heartbeats, both ends (% of one core) |",
        "|---|---|---|",
        *(f"| {'on' if sealed else 'off'} | {rate:,.0f} | {cpu:.1f} |" for sealed, rate, cpu in rows),
    ]
    print("\n".join(lines))
    if args.write:
        write_block(Path(args.write), "bench_pods_mac", "\n".join(lines))


if __name__ == "__main__":
    main()
