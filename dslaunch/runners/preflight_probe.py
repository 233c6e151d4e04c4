"""``dslaunch --preflight``'s probe and table (pure): what each host runs, how its answer is judged and shown.

Running the probe on the hosts is ``dslaunch.runners.preflight`` (over the runners' ssh and pdsh).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from dslaunch import __version__
from dslaunch.oslib.gpus import gpu_labels

PROBE = r"""
import json, os, socket, sys
from importlib import metadata
def ver(name):
    try:
        return metadata.version(name)
    except Exception:
        return None
vis = os.environ.get("CUDA_VISIBLE_DEVICES")
try:
    if vis is not None:
        gpus = len([v for v in vis.split(",") if v.strip()])
    else:
        gpus = len(os.listdir("/proc/driver/nvidia/gpus"))
except OSError:
    gpus = 0
port = int(sys.argv[1])
free = None
if port:
    s = socket.socket()
    try:
        s.bind(("", port)); free = True
    except OSError:
        free = False
    finally:
        s.close()
print("@dslaunch-preflight " + json.dumps({"python": sys.version.split()[0], "executable": sys.executable,
      "dslaunch": ver("dslaunch"), "torch": ver("torch"), "gpus": gpus, "port_free": free}))
"""
MARK = "@dslaunch-preflight "


@dataclass(frozen=True)
class Expected:
    python: str
    dslaunch: str
    torch: str | None
    gpus: int
    port: int


@dataclass(frozen=True)
class Row:
    host: str
    ok: bool
    cells: tuple[str, ...]
    problems: tuple[str, ...]


HEADER = ("host", "reach", "python", "dslaunch", "torch", "gpus/slots", "master port", "result")


def local_expected(port: int) -> Expected:
    from importlib import metadata

    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    return Expected(sys.version.split()[0], __version__, torch, len(gpu_labels(os.environ)), port)


def parse_probe(output: str) -> dict[str, Any] | None:
    for line in output.splitlines():
        if line.startswith(MARK):
            try:
                data = json.loads(line[len(MARK) :])
            except json.JSONDecodeError:
                return None
            return data if isinstance(data, dict) else None
    return None


def evaluate(host: str, slots: int, is_master: bool, expected: Expected, probe: tuple[int | None, str, str]) -> Row:
    """One table row from a host's probe result: its exit status, stdout and stderr (pure)."""
    status, output, err = probe
    data = parse_probe(output) if status == 0 else None
    if data is None:
        why = (err.strip().splitlines() or [f"status {status}"])[-1]
        return Row(host, False, (host, "NO", "-", "-", "-", "-", "-", "FAIL"), (f"{host}: not usable: {why}",))
    problems = []
    if data["python"] != expected.python:
        problems.append(
            f"{host}: python {data['python']} ({data['executable']}) differs from the launcher's {expected.python}"
        )
    if data["dslaunch"] != expected.dslaunch:
        problems.append(
            f"{host}: dslaunch {data['dslaunch'] or 'missing'} differs from the launcher's {expected.dslaunch}"
        )
    if data["torch"] != expected.torch:
        problems.append(
            f"{host}: torch {data['torch'] or 'missing'} differs from the launcher's {expected.torch or 'none'}"
        )
    gpus = int(data["gpus"])
    if (gpus or expected.gpus) and gpus < slots:
        problems.append(f"{host}: {gpus} visible GPU(s) for {slots} slot(s)")
    port_cell = "-"
    if is_master:
        if not expected.port:
            port_cell = "picked at launch"
        elif data["port_free"]:
            port_cell = f"{expected.port} free"
        else:
            port_cell = f"{expected.port} IN USE"
            problems.append(f"{host}: master port {expected.port} is already in use")
    cells = (
        host,
        "yes",
        data["python"],
        data["dslaunch"] or "missing",
        data["torch"] or "none",
        f"{gpus}/{slots}",
        port_cell,
        "FAIL" if problems else "ok",
    )
    return Row(host, not problems, cells, tuple(problems))


def render(rows: list[Row]) -> str:
    table = [HEADER, *(r.cells for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    for r in rows:
        lines += [f"  - {p}" for p in r.problems]
    return "\n".join(lines)


def probe_command(python: str, port: int) -> str:
    return shlex.join([python, "-c", PROBE, str(port)])
