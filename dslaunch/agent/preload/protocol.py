"""What the agent (client.py) and the zygote (server.py) say to each other; both sides import it.

The zygote is started as ``python -u -m dslaunch.agent.preload.server FD OWNER MODULES [warm]`` (:func:`server_args`):
FD its end of a ``SOCK_SEQPACKET`` socket pair, OWNER the pid of the process that started it (the agent, or, warm,
the launcher), MODULES comma-separated. Over the socket each message is one JSON object; file descriptors travel
with a request (SCM_RIGHTS).

- zygote, once it imported MODULES: ``{"ready": true}``, or ``{"fallback": WHY}`` (it cannot serve);
- agent, a rank to fork: ``{"argv", "env", "cwd", "agent", "id"}`` (:class:`Request`; ``argv`` is what follows
  ``python -u -m dslaunch.bootstrap``, ``agent`` the pid the rank must end up the child of) with the rank's
  stdin, stdout and stderr, and, warm, the write end of its exit-status pipe;
  zygote: ``{"id", "pid", "waiter"}`` (the rank and its intermediate process), or ``{"id", "fallback": WHY}``;
- launcher, before an attempt of a warm zygote: ``{"check": true, "id"}``; zygote: ``{"id", "ok": true}`` or
  ``{"id", "fallback": WHY}``.

A reply carries its request's ``id`` (the requester's pid and a count), so a requester skips a reply to an earlier
request (of an agent killed while it waited: a warm zygote outlives its agents).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

SERVER_MODULE = "dslaunch.agent.preload.server"  # the zygote's entry point, ``python -u -m`` it
MAX_MESSAGE = 1 << 20


def server_args(fd: int, owner: int, modules: Sequence[str], warm: bool) -> list[str]:
    """The zygote's command-line arguments (after ``-m SERVER_MODULE``)."""
    return [str(fd), str(owner), ",".join(modules), *(["warm"] if warm else [])]


def parse_server_args(argv: Sequence[str]) -> tuple[int, int, list[str], bool]:
    """(fd, owner, modules, warm) from :func:`server_args`'s list."""
    return int(argv[0]), int(argv[1]), [m for m in argv[2].split(",") if m], list(argv[3:]) == ["warm"]


@dataclass
class Request:
    """A rank to fork, as the zygote receives it."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    fds: list[int]  # stdin, stdout, stderr, and (warm) the exit-status pipe
    agent: int
    id: object = None

    @classmethod
    def from_message(cls, data: dict[str, Any], fds: list[int]) -> Request:
        return cls(data["argv"], data["env"], data["cwd"], fds, data["agent"], data.get("id"))


def send(sock: socket.socket, **message: object) -> None:
    """One message without fds (the zygote's replies)."""
    sock.send(json.dumps(message).encode())


def receive(sock: socket.socket) -> Any:
    """One message without fds (the zygote's first); ``{}`` when the other end closed."""
    return json.loads(sock.recv(MAX_MESSAGE) or b"{}")


def exchange(sock: socket.socket, request: dict[str, Any], request_id: str, fds: Sequence[int] = ()) -> dict[str, Any]:
    """Send one request (with ``fds``) under ``request_id``, return its reply, skipping replies to earlier requests."""
    request = {**request, "id": request_id}
    socket.send_fds(sock, [json.dumps(request).encode()], list(fds))
    while True:
        reply = json.loads(sock.recv(MAX_MESSAGE) or b'{"id": null}')
        if not isinstance(reply, dict):
            return {}
        if reply.get("id") in (request_id, None):
            return reply
