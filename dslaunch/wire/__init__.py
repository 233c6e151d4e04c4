"""Everything that crosses the launcher ↔ node-agent boundary, in one place (stdlib only).

- **The plan** (``plan_codec``): JSON, base64 for transports that need one line or one variable; never on a
  command line.
- **Events**, agent → launcher (``events``): one JSON object per line after ``MARKER``, read back by ``decoder``
  with every field checked; ``stream.split_events`` cuts a remote agent's stdout into event lines and output.
- **Control messages**, launcher → agent (``control``): whole lines on the agent's stdin, parsed exactly, never by
  substring; EOF means stop. The signals both sides mean are there too.

Every name is re-exported here: ``from dslaunch import wire`` then ``wire.RankExit``, ``wire.decode``, ...
"""

from __future__ import annotations

from dslaunch.wire.control import (
    _CONTROL_SIGNALS,
    ATTEMPT_END,
    FORWARDED_SIGNALS,
    HEARTBEAT,
    MAX_CONTROL_LINE,
    STACKS_SIGNAL,
    STOP,
    STOP_SIGNALS,
    TEARDOWN_SIGNAL,
    Command,
    ControlReader,
    StopAt,
    StopRequest,
    control_heartbeat,
    control_request_stop,
    control_signal,
    control_stop,
    control_stop_at,
    job_run,
    job_standby,
    parse_job_line,
    parse_stop_at,
    silence_bound,
)
from dslaunch.wire.decoder import _SCHEMAS, decode, decode_checked
from dslaunch.wire.events import (
    _KINDS,
    _NAMES,
    MARKER,
    Done,
    Event,
    Idle,
    NodeLost,
    NodeWindows,
    RankExit,
    Spawned,
    Stacks,
    StopAsked,
    StopStep,
    TimerWindow,
    encode,
    exit_code_of,
)
from dslaunch.wire.plan_codec import (
    PLAN_VAR,
    WireError,
    plan_from_b64,
    plan_from_env,
    plan_from_file,
    plan_to_b64,
    staged_from_file,
)
from dslaunch.wire.stream import FLUSH_LINE, split_events

__all__ = [
    "ATTEMPT_END",
    "FLUSH_LINE",
    "FORWARDED_SIGNALS",
    "HEARTBEAT",
    "MARKER",
    "MAX_CONTROL_LINE",
    "PLAN_VAR",
    "STACKS_SIGNAL",
    "STOP",
    "STOP_SIGNALS",
    "TEARDOWN_SIGNAL",
    "_CONTROL_SIGNALS",
    "_KINDS",
    "_NAMES",
    "_SCHEMAS",
    "Command",
    "ControlReader",
    "Done",
    "Event",
    "Idle",
    "NodeLost",
    "NodeWindows",
    "RankExit",
    "Spawned",
    "Stacks",
    "StopAsked",
    "StopAt",
    "StopRequest",
    "StopStep",
    "TimerWindow",
    "WireError",
    "control_heartbeat",
    "control_request_stop",
    "control_signal",
    "control_stop",
    "control_stop_at",
    "decode",
    "decode_checked",
    "encode",
    "exit_code_of",
    "job_run",
    "job_standby",
    "parse_job_line",
    "parse_stop_at",
    "plan_from_b64",
    "plan_from_env",
    "plan_from_file",
    "plan_to_b64",
    "silence_bound",
    "split_events",
    "staged_from_file",
]
