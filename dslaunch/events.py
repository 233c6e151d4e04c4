"""Agent → launcher events: one JSON object per marked line on the agent's stdout.

Rank output lines always carry a prefix, so a line that starts with
:data:`MARKER` can only come from the agent itself.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, field
from typing import Any

MARKER = "@dslaunch-event "


@dataclass(frozen=True)
class RankExit:
    """How one rank ended."""

    rank: int
    local_rank: int
    node_rank: int
    host: str
    pid: int
    code: int  # shell-style: 128+N for a death by signal N
    signal: str | None
    ts: float
    by_agent: bool  # it ended after the agent had signalled it (teardown)
    error: str | None = None  # traceback text from the rank's error file
    stderr_tail: tuple[str, ...] = field(default=())

    @property
    def failed(self) -> bool:
        return self.code != 0


def exit_code_of(returncode: int) -> tuple[int, str | None]:
    """Map a Popen returncode (negative for signals) to (shell code, signal name)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return 128 - returncode, name
    return returncode, None


def encode(kind: str, **payload: Any) -> str:
    return MARKER + json.dumps({"ev": kind, **payload}, separators=(",", ":")) + "\n"


def encode_exit(result: RankExit) -> str:
    return encode("exit", **asdict(result))


def decode(line: str) -> dict[str, Any] | None:
    """Return the event on a marked line, or None for ordinary output."""
    if not line.startswith(MARKER):
        return None
    try:
        event = json.loads(line[len(MARKER) :])
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and "ev" in event else None


def rank_exit_from(event: dict[str, Any]) -> RankExit:
    fields = {k: v for k, v in event.items() if k != "ev"}
    fields["stderr_tail"] = tuple(fields.get("stderr_tail", ()))
    return RankExit(**fields)
