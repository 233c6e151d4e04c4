"""One rank's timer window, as it crosses rank -> node agent (stdlib only, pure but for two small file helpers).

A rank sums its ``engine.timers`` regions over each window of ``steps`` step numbers (window N: steps
(N-1)*steps+1 to N*steps) and writes one record per window into
a ring of :data:`SLOTS` fixed-size slots in a file of its own (``DSLAUNCH_WINDOW_FILE``, made by its node agent);
the agent polls the file and relays each new record as a ``wire.Window`` event. A slot is
``seq (8) | length (4) | JSON payload | seq (8)``, written with one ``pwrite``: a reader that finds the two
``seq`` words unequal read it mid-write and looks again on its next poll.

The payload is bounded (:data:`MAX_REGIONS` names of :data:`MAX_NAME` characters) and every field is checked when
read back: a rank runs user code, so its file is input, never trusted.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

ENV_FILE = "DSLAUNCH_WINDOW_FILE"
ENV_STEPS = "DSLAUNCH_WINDOW_STEPS"
SLOTS = 16
SLOT_SIZE = 2048
FILE_SIZE = SLOTS * SLOT_SIZE
MAX_REGIONS = 24
MAX_NAME = 48
_HEAD = 12  # seq + length
_TAIL = 8


@dataclass(frozen=True)
class Region:
    """Seconds a rank spent in one named region over a window: in all, and in its fastest step."""

    name: str
    total: float
    fastest: float


@dataclass(frozen=True)
class Window:
    """``steps`` steps of one rank, the last being ``step``; ``wall``: seconds from the end of the previous
    window's last step (or of the rank's first step) to the end of this one's; ``first_step_at``: the Unix time
    of the rank's first step, in its first window only (else 0)."""

    rank: int
    index: int
    step: int
    steps: int
    wall: float
    regions: tuple[Region, ...]
    first_step_at: float = 0.0


def encode(w: Window) -> bytes:
    regions = [[r.name, round(r.total, 6), round(r.fastest, 6)] for r in w.regions[:MAX_REGIONS]]
    body = {"r": w.rank, "i": w.index, "s": w.step, "n": w.steps, "w": round(w.wall, 6), "t": regions}
    if w.first_step_at:
        body["f"] = round(w.first_step_at, 3)
    return json.dumps(body, separators=(",", ":")).encode()


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError("not a finite non-negative number")
    return float(value)


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a whole number")
    return value


def decode(data: bytes) -> Window | None:
    """The window in a payload; None for anything malformed, out of bounds or of the wrong types."""
    try:
        raw = json.loads(data)
        regions = raw["t"]
        if not isinstance(regions, list) or len(regions) > MAX_REGIONS:
            return None
        parsed = []
        for name, total, fastest in regions:
            if not isinstance(name, str) or not name or len(name) > MAX_NAME:
                return None
            parsed.append(Region(name, _number(total), _number(fastest)))
        steps = _count(raw["n"])
        if steps == 0:
            return None
        return Window(
            rank=_count(raw["r"]),
            index=_count(raw["i"]),
            step=_count(raw["s"]),
            steps=steps,
            wall=_number(raw["w"]),
            regions=tuple(parsed),
            first_step_at=_number(raw.get("f", 0.0)),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def frame(seq: int, payload: bytes) -> bytes | None:
    """A slot's bytes; None when the payload does not fit (the rank then sends nothing for that window)."""
    if len(payload) > SLOT_SIZE - _HEAD - _TAIL:
        return None
    mark = seq.to_bytes(8, "little")
    return mark + len(payload).to_bytes(4, "little") + payload + mark


def unframe(slot: bytes) -> tuple[int, bytes] | None:
    """(seq, payload) of a whole slot; None for an empty, torn or malformed one."""
    if len(slot) < _HEAD + _TAIL:
        return None
    seq = int.from_bytes(slot[:8], "little")
    length = int.from_bytes(slot[8:12], "little")
    if seq == 0 or length > SLOT_SIZE - _HEAD - _TAIL or len(slot) < _HEAD + length + _TAIL:
        return None
    if int.from_bytes(slot[_HEAD + length : _HEAD + length + _TAIL], "little") != seq:
        return None
    return seq, slot[_HEAD : _HEAD + length]


def write_slot(fd: int, seq: int, payload: bytes) -> None:
    """Window number ``seq`` (1, 2, ...) into its slot of the ring; never raises."""
    data = frame(seq, payload)
    if data is None:
        return
    try:
        os.pwrite(fd, data, (seq % SLOTS) * SLOT_SIZE)
    except OSError:
        pass


def read_new(fd: int, seen: int) -> list[tuple[int, bytes]]:
    """The slots written after window number ``seen``, oldest first, as (seq, payload)."""
    try:
        data = os.pread(fd, FILE_SIZE, 0)
    except OSError:
        return []
    found = []
    for k in range(SLOTS):
        got = unframe(data[k * SLOT_SIZE : (k + 1) * SLOT_SIZE])
        if got is not None and got[0] > seen:
            found.append(got)
    return sorted(found)
