"""Who holds a local TCP port, from /proc: what a "port in use" warning names, so the user (and CI's log) knows
which process took it. Only this host's processes the caller may read are named; others show as a pid-less line."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")
_STATES = {"01": "connected", "06": "time-wait", "0A": "listening"}
_MAX_NAMED = 3  # holders named in one message
_CMDLINE_CAP = 120


@dataclass(frozen=True)
class Holder:
    state: str  # "listening", "connected", ...
    inode: int


def parse_table(text: str, port: int) -> list[Holder]:
    """The sockets of one /proc/net/tcp{,6} text whose local port is ``port`` (malformed lines skipped)."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        local_port, state, inode = fields[1].rsplit(":", 1)[1], fields[3], fields[9]
        try:
            if int(local_port, 16) != port:
                continue
            found.append(Holder(_STATES.get(state.upper(), f"state {state}"), int(inode)))
        except ValueError:
            continue
    return found


def describe(port: int) -> str:
    """``"held by pid 412 (python -m x), listening"``; ``""`` when nothing on this host can be seen holding it."""
    holders = [h for table in _TABLES for h in parse_table(_read(table), port)]
    if not holders:
        return ""
    owners = _owners({h.inode for h in holders if h.inode})
    parts = []
    for holder in holders[:_MAX_NAMED]:
        pid = owners.get(holder.inode)
        who = f"pid {pid} ({_cmdline(pid)})" if pid else "a process not visible here"
        parts.append(f"{who}, {holder.state}")
    more = f" and {len(holders) - _MAX_NAMED} more" if len(holders) > _MAX_NAMED else ""
    return "held by " + "; ".join(parts) + more


def _owners(inodes: set[int]) -> dict[int, int]:
    """socket inode -> pid, for the processes whose fds can be read."""
    found: dict[int, int] = {}
    for pid in _pids():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target.endswith("]"):
                inode = int(target[8:-1]) if target[8:-1].isdigit() else 0
                if inode in inodes:
                    found.setdefault(inode, pid)
        if len(found) == len(inodes):
            break
    return found


def _pids() -> Iterable[int]:
    try:
        return sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    except OSError:
        return ()


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(_CMDLINE_CAP * 2)
    except OSError:
        return "?"
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or "?"
    return text if len(text) <= _CMDLINE_CAP else text[: _CMDLINE_CAP - 3] + "..."


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""
