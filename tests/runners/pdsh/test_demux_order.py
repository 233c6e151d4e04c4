"""pdsh's stdout and stderr are two pipes read by two threads: a host's last lines on stdout must not be lost to
the "ssh exited" line pdsh writes on stderr right after them (issue 22: "node 1 (node2) disappeared ... without
reporting", seen under load while another host flooded stdout).

A stand-in for pdsh (a real process) writes a flood of node1's output, then node2's Done event, then on stderr
that node2's ssh exited, then lingers, as pdsh does while other hosts still run.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dslaunch import wire
from dslaunch.output.lanes import ErrLane
from dslaunch.runners.pdsh.demux import PdshDemux

pytestmark = [pytest.mark.launch]

FAKE_PDSH = """
import fcntl, os, sys, time
fcntl.fcntl(1, 1031, 1 << 20)  # F_SETPIPE_SZ: a pipe as full as a busy pdsh's, which the write need not wait for
flood = b"".join(b"node1: x%d\\n" % i for i in range(70000))
os.write(1, flood + b"node2: " + sys.argv[1].encode() + b"node2: after the event\\n")
os.write(2, b"pdsh@here: node2: ssh exited with exit code 7\\n")
time.sleep(float(sys.argv[2]))
"""


def _node2_stream(linger: float) -> tuple[list[str], int]:
    done = wire.encode(wire.Done(node_rank=1, code=7))
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_PDSH, done, str(linger)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(0.3)  # everything is written before the demux starts reading: both pipes are ready at once
    try:
        demux = PdshDemux(proc, ["node1", "node2"], ErrLane())
        got = []
        while (line := demux.queues["node2"].get()) is not None:
            got.append(line)
        return got, demux.status["node2"]
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("attempt", range(3))
def test_a_host_s_last_lines_come_before_its_end(attempt: int) -> None:
    got, status = _node2_stream(linger=5.0)
    assert [wire.decode(line) for line in got if line.startswith(wire.MARKER)] == [wire.Done(node_rank=1, code=7)]
    assert status == 7


MIXED_PDSH = """
import os, sys
lines = []
for i in range(3000):
    host = "node1" if (i // (1 + i % 5)) % 2 else "10.0.0.7"  # runs of one to five lines, alternating
    lines.append(f"{host}: {host} line {i}: a: b\\n")
    if i == 1500:
        lines.append("node1: " + sys.argv[1])
os.write(1, "".join(lines).encode() + b"node1: " + sys.argv[2].encode() + b"10.0.0.7: " + sys.argv[3].encode())
"""


def test_interleaved_hosts_come_apart_whole_and_in_order() -> None:
    """pdsh interleaves hosts every few lines: each host gets exactly its lines, label off, events alone."""
    spawned = wire.encode(wire.Spawned(rank=0, local_rank=0, pid=1, host="node1"))
    done = [wire.encode(wire.Done(node_rank=n, code=0)) for n in (0, 1)]
    proc = subprocess.Popen(
        [sys.executable, "-c", MIXED_PDSH, spawned, *done],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        demux = PdshDemux(proc, ["node1", "10.0.0.7"], ErrLane())
        streams = {}
        for host in ("node1", "10.0.0.7"):
            items = []
            while (item := demux.queues[host].get()) is not None:
                items.append(item)
            streams[host] = items
    finally:
        proc.wait()
    for host in ("node1", "10.0.0.7"):
        output = "".join(i for i in streams[host] if not i.startswith(wire.MARKER))
        wanted = [i for i in range(3000) if ("node1" if (i // (1 + i % 5)) % 2 else "10.0.0.7") == host]
        assert output == "".join(f"{host} line {i}: a: b\n" for i in wanted)
        events = [wire.decode(i) for i in streams[host] if i.startswith(wire.MARKER)]
        assert all(e is not None for e in events) and isinstance(events[-1], wire.Done)
    node1 = streams["node1"]
    at = next(
        k for k, i in enumerate(node1) if wire.decode(i) == wire.Spawned(rank=0, local_rank=0, pid=1, host="node1")
    )
    before = [i for i in range(1501) if (i // (1 + i % 5)) % 2]
    assert "".join(node1[:at]) == "".join(f"node1 line {i}: a: b\n" for i in before)  # in order around the event
    assert len(streams["node1"]) < 100  # runs of a chunk went on together, not a line or a run at a time


LATE_STDERR_PDSH = """
import os, sys, time
os.write(1, b"node1: " + sys.argv[1].encode())  # the agent's Done: its stdout is over
time.sleep(0.5)  # its stderr comes later, on pdsh's other pipe, read by another thread
os.write(2, b"node1: [node1:rank0]: the last words\\n")
os.write(2, b"node1: @dslaunch-attempt-end\\n")
time.sleep(5)
"""


def test_a_one_attempt_host_ends_only_once_its_stderr_is_all_in() -> None:
    """The attempt's console closes when every host's stream has ended: a host's stderr lines that came after its
    Done were printed uncollapsed, or lost in a collapse already flushed (256 ranks on 4 hosts, under load)."""
    from dslaunch.runners.pdsh.runner import PdshNode

    printed: list[bytes] = []

    class Printed(ErrLane):
        def write(self, data: bytes, *, collapse: bool = True) -> None:
            printed.append(data)

    done = wire.encode(wire.Done(node_rank=0, code=0))
    proc = subprocess.Popen(
        [sys.executable, "-c", LATE_STDERR_PDSH, done],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        node = PdshNode(0, "node1", PdshDemux(proc, ["node1"], Printed()), lambda *_: True)
        started = time.monotonic()
        got = list(node.lines())
        waited = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    assert [wire.decode(line) for line in got] == [wire.Done(node_rank=0, code=0)]
    assert printed == [b"[node1:rank0]: the last words\n"] and waited < 3  # the marker itself never shows
