"""torchrun's rendezvous options, for one launcher per node (a Kubernetes pod each): where the pods meet, and
how long the coordinator waits for them (docs/kubernetes.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from dslaunch.cli.help_sections import PODS, Option
from dslaunch.cli.types import pet
from dslaunch.errors import DslaunchError

DEFAULT_RDZV_PORT = 29400  # torchrun's, for an --rdzv-endpoint without a port
DEFAULT_JOIN_TIMEOUT = 600.0  # torchrun's join_timeout
DEFAULT_LAST_CALL = 2.0  # torchrun's last_call_timeout is 30 s: an elastic attempt with MIN pods waits this long
# torchrun's --rdzv-conf keys: the ones dslaunch uses, and the ones it accepts and ignores (said in --help)
USED_CONF = ("join_timeout", "last_call_timeout")
IGNORED_CONF = (
    "close_timeout",
    "read_timeout",
    "timeout",
    "is_host",
    "keep_alive_interval",
    "keep_alive_max_attempt",
    "heartbeat",
    "store_type",
    "use_libuv",
)

PARAMS: list[click.Parameter] = [
    Option(
        ["--rdzv-endpoint", "--rdzv_endpoint", "rdzv_endpoint"],
        section=PODS,
        envvar=pet("rdzv_endpoint"),
        metavar="HOST[:PORT]",
        help="One launcher per node: where the coordinating launcher (node rank 0's, or in an elastic job the one "
        "on this host) takes the other pods' connections "
        f"[default: --master-addr, port --master-port + 1; PORT default {DEFAULT_RDZV_PORT}].",
    ),
    Option(
        ["--rdzv-backend", "--rdzv_backend", "rdzv_backend"],
        section=PODS,
        envvar=pet("rdzv_backend"),
        type=click.Choice(["static", "c10d"]),
        default="static",
        show_default=True,
        help="Both mean dslaunch's own authenticated channel between the pods (docs/kubernetes.md); c10d without "
        "--node-rank (or with --nnodes MIN:MAX) is the elastic shape: the coordinator gives the node ranks.",
    ),
    Option(
        ["--rdzv-conf", "--rdzv_conf", "rdzv_conf"],
        section=PODS,
        envvar=pet("rdzv_conf"),
        metavar="KEY=VALUE,...",
        help=f"torchrun's rendezvous settings: join_timeout=SECONDS (how long the pods wait for each other, default "
        f"{DEFAULT_JOIN_TIMEOUT:g}) and last_call_timeout=SECONDS (with MIN of MIN:MAX pods, how long to wait for "
        f"more, default {DEFAULT_LAST_CALL:g}) are used; {', '.join(IGNORED_CONF[:3])} and the rest are accepted and "
        "ignored.",
    ),
]


@dataclass(frozen=True)
class PodChoices:
    endpoint: tuple[str, int] | None
    backend: str
    join_timeout: float
    last_call: float = DEFAULT_LAST_CALL


def parse(values: Mapping[str, Any]) -> PodChoices:
    endpoint = values.get("rdzv_endpoint") or None
    conf = _conf(values.get("rdzv_conf") or "")
    return PodChoices(
        endpoint=_endpoint(endpoint) if endpoint else None,
        backend=values.get("rdzv_backend") or "static",
        join_timeout=conf.get("join_timeout", DEFAULT_JOIN_TIMEOUT),
        last_call=conf.get("last_call_timeout", DEFAULT_LAST_CALL),
    )


def _endpoint(text: str) -> tuple[str, int]:
    host, port = text.strip(), DEFAULT_RDZV_PORT
    if host.startswith("["):  # [v6]:port
        inner, _, rest = host[1:].partition("]")
        host, tail = inner, rest
    else:
        head, sep, tail = host.rpartition(":")
        if sep and head and ":" not in head:
            host = head
        else:
            tail = ""
    if tail:
        digits = tail.lstrip(":")
        if not (digits.isascii() and digits.isdigit() and 1 <= int(digits) <= 65535):
            raise DslaunchError(f"{text!r}: give HOST or HOST:PORT, PORT from 1 to 65535", option="--rdzv-endpoint")
        port = int(digits)
    if not host or any(c.isspace() or ord(c) < 32 for c in host):
        raise DslaunchError(f"{text!r}: give HOST or HOST:PORT", option="--rdzv-endpoint")
    return host, port


LIMITS = {"join_timeout": 7 * 86400.0, "last_call_timeout": 60.0}


def _conf(text: str) -> dict[str, float]:
    """The keys of torchrun's --rdzv-conf that dslaunch uses, checked; the others it accepts are dropped."""
    used: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in USED_CONF + IGNORED_CONF:
            raise DslaunchError(
                f"{item!r}: give KEY=VALUE pairs, KEY one of {', '.join(USED_CONF + IGNORED_CONF)}",
                option="--rdzv-conf",
            )
        if key in LIMITS:
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            low_ok = seconds > 0 if key == "join_timeout" else seconds >= 0
            if not (low_ok and seconds <= LIMITS[key]):
                raise DslaunchError(
                    f"{key}={value}: give seconds, {'more than 0' if key == 'join_timeout' else 'from 0'} and at most "
                    f"{LIMITS[key]:g}",
                    option="--rdzv-conf",
                )
            used[key] = seconds
    return used
