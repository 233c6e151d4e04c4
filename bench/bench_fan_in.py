"""What a pods' coordinator spends on the ranks' timer windows, per interval (issue 54, item 4).

    python bench/bench_fan_in.py [--pods 256,1024,4096,16384] [--ranks 8] [--windows 4] [--tree DIR]
                                 [--write docs/benchmarks.md]

In process, no sockets: the lines a coordinator reads from its pods in one window interval (each pod's ranks'
timer windows of one number), each checked as ``PodLink`` checks it (``pods.messages.from_pod``: the decoder, the
pod's own node and ranks), then handed to the job's observer (``observe.session.Observer.on_event``: grouping,
the figures, the straggler watch, the breakdown's period, printed every other window to /dev/null), with
``--straggler-factor`` and ``--wall-clock-breakdown`` on. The figure is CPU seconds per window interval (the best of
``--windows`` windows after a first, each window of every pod) and µs per pod. Two shapes:

- **one event a rank** (``wire.TimerWindow``: a pod's launcher forwarded its agent's event for each rank), what
  the tree at ``--tree`` (a checkout from before issue 54) and this one both read;
- **one event a node** (``wire.NodeWindows``: the agent sends its ranks' windows of one number together), this
  tree only.

The coordinator today also re-encodes each checked event and its job loop decodes it again (``PodLink.lines``,
``job/loop.py::_pump``): ``+ relay`` adds that. A script, not a test: CPU time of one process on a shared machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REGIONS = ("forward", "backward", "allreduce", "optimizer")


def _lines(pods: int, ranks: int, index: int, per_node: bool) -> list[tuple[int, str]]:
    """(node rank, line) for window ``index`` of every pod: ~0.5 s steps, 5 a window, four regions, a little noise,
    every figure to the µs as a rank's record holds it; a node's as its agent makes it (``node_windows``)."""
    from dslaunch import wire

    rng = random.Random(index)
    out = []
    for node in range(pods):
        windows = []
        for rank in range(node * ranks, (node + 1) * ranks):
            wall = round(2.5 + rng.random() * 0.01, 6)
            regions = []
            for name, share in zip(REGIONS, (0.3, 0.5, 0.15, 0.05)):
                total = round(share * wall * (1 + rng.random() * 0.05), 6)
                regions.append((name, total, round(total / 5 * 0.9, 6)))
            windows.append(wire.TimerWindow(node, rank, index, index * 5, 5, wall, tuple(regions)))
        if per_node:
            from dslaunch.observe.record import Region, Window
            from dslaunch.observe.window_relay import node_windows

            got = [
                (w.rank, Window(w.rank, index, w.step, 5, w.wall, tuple(Region(*r) for r in w.regions)))
                for w in windows
            ]
            out.append((node, wire.encode(node_windows(node, index, got))))
        else:
            out += [(node, wire.encode(w)) for w in windows]
    return out


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(null)
        os.close(saved)


def measure(pods: int, ranks: int, windows: int, per_node: bool, relay: bool) -> float:
    """CPU seconds of the coordinator per window interval, the best of ``windows`` after the first."""
    from dslaunch import wire
    from dslaunch.observe import session
    from dslaunch.observe.settings import ObserveSettings
    from dslaunch.plan import LaunchPlan, NodePlan, Program
    from dslaunch.pods import messages

    nodes = tuple(
        NodePlan(f"pod-{n}", n, ("0",) * ranks, tuple(range(n * ranks, (n + 1) * ranks))) for n in range(pods)
    )
    plan = LaunchPlan("node", "bench", nodes, "pod-0", 29500, Program("train.py"))
    settings = ObserveSettings(breakdown=True, every_steps=10, straggler_factor=1.5)
    observer = session.Observer(settings, plan)
    observer.begin(plan)
    own = {n.node_rank: frozenset(n.ranks) for n in nodes}
    best = float("inf")
    for index in range(1, windows + 2):
        lines = _lines(pods, ranks, index, per_node)
        with _quiet():
            began = time.process_time()
            for node, line in lines:
                event = messages.from_pod(line, node, own[node])
                if relay:
                    event = wire.decode(wire.encode(event)) or event
                observer.on_event(event, time.monotonic())
            took = time.process_time() - began
        assert observer.done_index == index, (observer.done_index, index)
        if index > 1:
            best = min(best, took)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", default="256,1024,4096,16384")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--shape", choices=("rank", "node"), default=None, help="one shape only (with --tree: rank)")
    parser.add_argument("--relay", action="store_true", help="add the coordinator's re-encode and second decode")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose dslaunch to measure")
    a = parser.parse_args()
    sys.path.insert(0, str(a.tree))
    shapes = [a.shape == "node"] if a.shape else [False, True]
    for pods in (int(p) for p in a.pods.split(",")):
        for per_node in shapes:
            took = measure(pods, a.ranks, a.windows, per_node, a.relay)
            shape = "node" if per_node else "rank"
            print(
                f"{pods} pods x {a.ranks} ranks, one event a {shape}{' + relay' if a.relay else ''}: "
                f"{took:.3f} CPU s per window, {took / pods * 1e6:.1f} µs per pod",
                flush=True,
            )


if __name__ == "__main__":
    main()
