"""What decoding a message costs, and what the decoder's imports cost each start-up path (issue 54, item 3).

    python bench/bench_wire.py [--number 20000] [--imports 7] [--write docs/benchmarks.md]

Two tables:

- **decode, µs per message** (CPU time, the best of 7 repeats of ``--number`` decodes: the machine is shared, and
  the best run is the one least disturbed), for the messages a coordinator reads most: ``before``, the decoder as
  it was (``json.loads``, then ``wire_check.fields``' loop over the fields, then the dataclass's ``__init__``);
  ``now``, ``wire.decode_checked`` (orjson, one compiled checker per kind, no ``__init__``); and, where msgspec is
  installed, ``msgspec``: its JSON decoder into typed, constrained ``Struct`` mirrors of the same kinds (a tagged
  union; what the decoder would be had it adopted msgspec).
- **imports, CPU ms** (``time.process_time`` in a fresh interpreter, the median of ``--imports`` interleaved
  runs): each start-up path's own imports, then what importing msgspec or orjson after them adds (what the wire
  importing one of them would add there).

A script, not a test: the machine is shared and noisy; CPU time and the best of several repeats keep the
figures steady.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository root
from bench.docblock import write_block
from dslaunch import wire
from dslaunch.wire.decoder import _SCHEMAS
from dslaunch.wire_check import Malformed, fields

STACKS = tuple((r, "collective", 90, 0.5) for r in range(8))
TRACEBACK = "Traceback (most recent call last):\n" + '  File "train.py", line 10, in <module>\n' * 40


def messages() -> dict[str, wire.Event]:
    regions = (("forward", 0.31, 0.06), ("backward", 0.62, 0.12), ("allreduce", 0.2, 0.03), ("optimizer", 0.05, 0.01))
    return {
        "Idle (a node's progress)": wire.Idle(1234, True, 8),
        "StopStep": wire.StopStep(1234, 90211),
        "Done": wire.Done(1234, 0),
        "Spawned": wire.Spawned(9876, 4, 402115, "trainer-worker-1234.trainer.default.svc"),
        "RankExit (clean)": wire.RankExit(9876, 4, 1234, "trainer-worker-1234", 402115, 0, None, 1.7e9, True),
        "RankExit (failed: 2 KiB traceback, 20-line tail)": wire.RankExit(
            9876, 4, 1234, "trainer-worker-1234", 402115, 1, None, 1.7e9, False, TRACEBACK, ("x" * 100,) * 20, 4
        ),
        "TimerWindow (one rank, 4 regions)": wire.TimerWindow(1234, 9876, 18, 90, 5, 1.51, regions),
        "Stacks (8 ranks)": wire.Stacks(1234, "trainer-worker-1234", STACKS),
        "NodeWindows (8 ranks, 4 regions: one node's window)": _node_windows(regions),
    }


def _node_windows(regions: tuple[tuple[str, float, float], ...]) -> wire.NodeWindows:
    """Eight ranks' windows as their agent sends them (``window_relay.node_windows``), figures to the µs."""
    from dslaunch.observe.record import Region, Window
    from dslaunch.observe.window_relay import node_windows

    got = []
    for r in range(8):
        mine = tuple(Region(n, round(t + r / 1e6, 6), f) for n, t, f in regions)
        got.append((r, Window(r, 18, 90, 5, round(1.51 + r / 1e6, 6), mine)))
    return node_windows(1234, 18, got)


def before(line: str) -> wire.Event | Malformed | None:
    """The decoder as it was before issue 54 (wire.py, commit c6c3232): json, the loop over the fields, __init__."""
    if not line.startswith(wire.MARKER):
        return None
    try:
        raw = json.loads(line[len(wire.MARKER) :])
        cls = wire._KINDS[raw.pop("ev")]
        required, optional = _SCHEMAS[cls]
        return cls(**fields(raw, required, optional))
    except Malformed as exc:
        return exc


def _msgspec_decoder() -> Callable[[str], object] | None:
    """msgspec Structs mirroring the kinds above, with the same constraints (bench/wire_msgspec.py); None without
    msgspec."""
    try:
        from bench import wire_msgspec
    except ImportError:
        return None
    return wire_msgspec.decode


def _per_call(fn: Callable[[str], object], line: str, number: int) -> float:
    best = float("inf")
    for _ in range(7):
        began = time.process_time()
        for _ in range(number):
            fn(line)
        best = min(best, time.process_time() - began)
    return best / number * 1e6


def decode_table(number: int) -> str:
    spec = _msgspec_decoder()
    rows = ["| message | bytes | before (µs) | now (µs) | speed-up | msgspec (µs) |", "|---|---|---|---|---|---|"]
    for name, event in messages().items():
        line = wire.encode(event)
        assert before(line) == event and wire.decode(line) == event, name
        old, new = _per_call(before, line, number), _per_call(wire.decode_checked, line, number)
        mirrored = spec is not None and not isinstance(spec(line), Exception)  # wire_msgspec has no NodeWindows
        other = f"{_per_call(spec, line, number):.2f}" if spec is not None and mirrored else "-"
        rows.append(f"| {name} | {len(line)} | {old:.2f} | {new:.2f} | {old / new:.1f}x | {other} |")
    return "\n".join(rows)


PATHS = {
    "launcher, `dslaunch --help`": "import dslaunch.cli.command",
    "launcher, launching (+ job.loop, runners.forked)": "import dslaunch.cli.command, dslaunch.job.loop, "
    "dslaunch.runners.forked",
    "node agent (`python -m dslaunch.agent`)": "import dslaunch.agent.__main__",
    "rank (`python -m dslaunch.bootstrap`)": "import dslaunch.bootstrap.run",
}
_CHILD = (
    "import time; a = time.process_time(); {path}; b = time.process_time(); import {extra}; "
    "print(b - a, time.process_time() - b)"
)


def import_table(runs: int) -> str:
    extras = ("msgspec", "orjson")
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(runs):  # interleaved: each path and extra once a round
        for name, path in PATHS.items():
            for extra in extras:
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD.format(path=path, extra=extra)], capture_output=True, text=True
                )
                if out.returncode != 0:
                    got.setdefault((name, extra), [])
                    continue
                own, more = map(float, out.stdout.split())
                got.setdefault((name, extra), []).append((own * 1e3, more * 1e3))
    rows = ["| path | its imports (CPU ms) | + msgspec | + orjson |", "|---|---|---|---|"]
    for name in PATHS:
        own = statistics.median(o for e in extras for o, _ in got[(name, e)]) if got[(name, extras[1])] else 0.0
        cells = [f"{statistics.median(m for _, m in got[(name, e)]):.1f}" if got[(name, e)] else "-" for e in extras]
        rows.append(f"| {name} | {own:.1f} | " + " | ".join(f"+{c}" for c in cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--imports", type=int, default=7)
    parser.add_argument("--write", type=Path)
    a = parser.parse_args()
    load = " / ".join(f"{x:.1f}" for x in __import__("os").getloadavg())
    table = decode_table(a.number)
    imports = import_table(a.imports) if a.imports else ""
    out = "\n\n".join(
        [
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Python {sys.version.split()[0]}, "
            f"load average {load} (1 / 5 / 15 min) at the start; decode: CPU µs per message, best of 7 x {a.number}",
            table,
            *([f"Imports: CPU ms, median of {a.imports} interleaved runs", imports] if imports else []),
        ]
    )
    print(out)
    if a.write:
        write_block(a.write, "bench_wire", out)


if __name__ == "__main__":
    main()
