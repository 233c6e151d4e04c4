"""What may come in on an established pods' link, checked (pure): the control messages by kind, each field's type and
range (``wire_check``), and every event bound to the link it came on.

A pod speaks for its own node only: its rank exits, idle reports, stacks and end, each with its node rank and, for
a rank, one of that node's ranks. The coordinator speaks for the job: stop, stacks requests, the attempt's end, and
the other pods' rank exits and losses (never this pod's own). Anything else is :class:`Malformed`: the side that
reads it ends that link with the reason (``Link.refuse``), so a pod that holds the secret but sends junk (a bug,
another version, a compromised pod) is lost like a pod whose connection dropped, and changes nothing else.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from typing import Any

from dslaunch import wire, wire_check
from dslaunch.channel.link import MAX_LINE
from dslaunch.limits import MAX_WORLD_SIZE
from dslaunch.wire_check import Bool, Int, ListOf, Malformed, Rejects, Spec, Text

_ATTEMPT = Int(0, 1 << 20)
_NODE = Int(0, MAX_WORLD_SIZE)
_HOST = Text(253)
_CODE = Int(0, 255)

# The coordinator's control messages (``{"t": KIND, ...}``): required fields, optional fields.
FROM_COORDINATOR: dict[str, tuple[dict[str, Spec], dict[str, Spec]]] = {
    "start": ({"attempt": _ATTEMPT, "node_rank": _NODE, "hosts": ListOf(_HOST, MAX_WORLD_SIZE)}, {"nnodes": _NODE}),
    "standby": ({"attempt": _ATTEMPT, "nnodes": _NODE}, {}),
    "end": ({"code": _CODE, "last": Bool()}, {"cause": Text(1000)}),
    "refused": ({"why": Text(4096)}, {}),
    "stop": ({}, {"signum": Int(1, 64), "now": Bool()}),  # with signum: a requested stop (docs/stopping.md)
    "stop_at": ({"step": Int(1, 1 << 62)}, {}),  # the job's stop step (docs/stopping.md)
    "signal": ({"signum": Int(1, 64)}, {}),
}
# What a pod's launcher sends after the handshake: events only (heartbeats are taken off by the link).
POD_EVENTS = (
    wire.Spawned,
    wire.RankExit,
    wire.Idle,
    wire.Stacks,
    wire.Done,
    wire.StopAsked,
    wire.StopStep,
    wire.TimerWindow,
    wire.NodeWindows,  # its ranks' windows of one number, one event (issue 54)
)

control = wire_check.control  # a control message of given kinds, checked (shared with the Slurm tasks' channel)
rejected = Rejects()  # every malformed message this launcher has read on a pods' link


def from_pod(line: str, node_rank: int, ranks: Collection[int] | None) -> wire.Event:
    """An event from the pod of ``node_rank`` (``ranks``: its ranks in the attempt, None before they are known),
    checked and bound to it; raises ``Malformed``."""
    event = wire.decode_checked(line)
    if event is None:
        raise Malformed("not an event")
    if isinstance(event, Malformed):
        raise event
    if not isinstance(event, POD_EVENTS):
        raise Malformed(f"a pod does not send {type(event).__name__}")
    said = getattr(event, "node_rank", node_rank)  # a Spawned names no node: its rank is checked below
    if said != node_rank:
        raise Malformed(f"{type(event).__name__} for node {said} on node {node_rank}'s link")
    if isinstance(event, (wire.Spawned, wire.RankExit, wire.TimerWindow)):
        told = [event.rank]
    elif isinstance(event, wire.NodeWindows):
        told = list(event.ranks)
    else:
        told = [r[0] for r in getattr(event, "ranks", ())]
    strangers = [r for r in told if ranks is not None and r not in ranks]
    if strangers:
        raise Malformed(f"rank {strangers[0]} is not one of node {node_rank}'s")
    return event


def from_coordinator(line: str, node_rank: int) -> wire.RankExit | wire.NodeLost | dict[str, Any]:
    """A message from the coordinator to the pod of ``node_rank``: another node's rank exit or loss, or a control
    message; raises ``Malformed``."""
    if line.startswith(wire.MARKER):
        event = wire.decode_checked(line)
        if isinstance(event, Malformed):
            raise event
        if not isinstance(event, (wire.RankExit, wire.NodeLost)):
            raise Malformed(f"the coordinator does not relay {type(event).__name__}")
        if event.node_rank == node_rank:
            raise Malformed(f"{type(event).__name__} for this pod's own node {node_rank}")
        return event
    return control(line, FROM_COORDINATOR)


def encoded(event: wire.Event) -> bytes:
    """``event``'s line, cut to fit the link's bound (``link.MAX_LINE``): a rank exit whose error and stderr tail
    are too long (a 64 KiB traceback, JSON-escaped) keeps the head and the end of each, and says so."""
    data = wire.encode(event).encode()
    if not isinstance(event, wire.RankExit):
        return data
    error, tail = event.error or "", event.stderr_tail
    while len(data) > MAX_LINE + 1 and (error or tail):
        error = _cut(error, len(error) // 2) if len(error) > 200 else ""
        tail = tail[len(tail) // 2 :] if len(tail) > 1 else tuple(_cut(t, len(t) // 2) for t in tail if len(t) > 200)
        data = wire.encode(replace(event, error=error or None, stderr_tail=tail)).encode()
    return data


def _cut(text: str, keep: int) -> str:
    note = "\n[... cut by dslaunch to fit the pods' link ...]\n"
    return text[: keep // 2] + note + text[len(text) - keep // 2 :]


def note(why: str, peer: str) -> None:
    """Count a malformed message; the first is logged at debug."""
    if rejected.note(why):
        from dslaunch.logs import get_logger

        get_logger("launcher").debug("malformed message on a pods' link", peer=peer, why=why)
