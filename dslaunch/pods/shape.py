"""What every pod of a job must agree on, and the words for a pod that does not (pure).

Each pod's launcher builds its plan from its own environment. Under one run id, pods that were given different
ranks per pod, program, mesh or restarts would run as one broken job (ranks missing from the world, a torch job
hanging at rendezvous). So a pod sends what it was given (``of_plan``) in its handshake answer, under the MAC,
and the coordinator compares it with its own (``mismatch``): a pod that differs is refused with both values
named, and the coordinator says so too. Values are short: a long one keeps its head and a digest of the whole.
"""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Mapping

from dslaunch.plan import LaunchPlan

VALUE_CHARS = 160  # a value longer than this is sent as its head and a digest of the whole
MAX_ENTRIES = 16


def of_plan(plan: LaunchPlan) -> dict[str, str]:
    """This pod's side of what the pods must agree on, by name in words."""
    program = plan.program
    words = [*(["-m"] if program.module else []), *(["--no-python"] if program.no_python else []), program.target]
    pods = plan.pods
    hang = plan.hang_timeout
    given = {
        "ranks per pod": str(len(plan.nodes[0].slots)) if plan.nodes else "0",
        "pods": f"{pods.nnodes_min}:{pods.nnodes_max}" if pods.nnodes_max else str(len(plan.nodes)),
        "program and arguments": shlex.join([*words, *program.args]),
        "mesh": dict(plan.env).get("DSLAUNCH_MESH", "(none)"),
        "max restarts": str(plan.restarts.max_restarts),
        "master port": str(plan.master_port),
        "hang timeout": "off" if hang is None else f"{hang:g} s",
    }
    return {name: _short(value) for name, value in given.items()}


def mismatch(ours: Mapping[str, str], theirs: Mapping[str, str], who: str) -> tuple[str, str] | None:
    """None when ``theirs`` (the pod ``who``'s) agrees with ``ours`` (the coordinator's); else the words for the
    refused pod and for the coordinator, each naming both values."""
    names = [name for name in ours if theirs.get(name) != ours[name]]
    names += [name for name in theirs if name not in ours]
    if not names:
        return None
    pod = "; ".join(f"{n}: {_said(theirs, n)} on this pod, {_said(ours, n)} on the coordinator" for n in names)
    here = "; ".join(f"{n}: {_said(theirs, n)} on {who}, {_said(ours, n)} here" for n in names)
    return f"this pod does not match the job: {pod}", f"{who} does not match the job: {here}"


def _said(shape: Mapping[str, str], name: str) -> str:
    return repr(shape[name]) if name in shape else "(not given)"


def _short(value: str) -> str:
    if len(value) <= VALUE_CHARS:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:16]
    tail = f"... ({len(value)} characters, sha256 {digest})"
    return value[: VALUE_CHARS - len(tail)] + tail
