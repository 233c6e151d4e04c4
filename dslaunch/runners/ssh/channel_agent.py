"""Job agents over ssh (``--max-restarts`` > 0): one agent per host, started once, to which
each attempt is a line on the channel it already has (agent/job_agent.py, runners/remote/job_agents.py).

A restart therefore costs no ssh handshake, no new session and no new agent, and with ``--preload`` no import: the
host's zygote stays warm. Stops, signals and stack requests go on the same channel as for a one-attempt agent.
EOF on an agent's stdin ends it: the job's end (:meth:`SshJobAgent.close`), the launcher's death or a lost
connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from dslaunch import wire
from dslaunch.job.result import START_FAILED
from dslaunch.output.lanes import ErrLane
from dslaunch.runners.remote.job_agents import CLOSE_WAIT
from dslaunch.runners.ssh.connect import RECV


class SshJobAgent:
    """The job agent on one host (a ``JobAgent``): its connection, its channel and its two streams."""

    def __init__(self, host: str, conn: Any, command: str, err: ErrLane) -> None:
        self.host = host
        self.err = err  # our stderr (the runner's)
        self.conn = conn
        self.channel = conn.client.get_transport().open_session()
        self.channel.exec_command(command)
        self._events = wire.split_events(iter(lambda: self.channel.recv(RECV), b""))
        self._lock = threading.Lock()
        self.err_ended = threading.Event()
        self.dead = False
        threading.Thread(target=self._relay_err, name=f"stderr {host}", daemon=True).start()

    def usable(self) -> bool:
        return not self.dead and self.status() is None

    def status(self) -> int | None:
        if self.channel.exit_status_ready():
            status = self.channel.recv_exit_status()
            return START_FAILED if status == -1 else status
        if self.channel.closed or not self._transport_up():
            return START_FAILED
        return None

    def send(self, data: bytes) -> bool:
        with self._lock:  # a stop from the job loop and a signal from its signal handler may cross
            try:
                self.channel.sendall(data)
                return True
            except (OSError, EOFError, Exception):  # noqa: BLE001 - a dead channel: its stream ends, the job sees it
                return False

    def abort(self) -> None:
        self.conn.close()  # EOF on the agent's stdin: it tears its node down and ends

    def close(self, wait: float = CLOSE_WAIT) -> None:
        try:
            self.channel.shutdown_write()
        except (OSError, EOFError, Exception):  # noqa: BLE001 - already gone
            pass
        deadline = time.monotonic() + wait
        while not self.channel.exit_status_ready() and self._transport_up() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.conn.close()

    def _transport_up(self) -> bool:
        transport = self.channel.get_transport()
        return transport is not None and transport.is_active()

    def events(self) -> Iterator[str]:
        return self._events

    def _relay_err(self) -> None:
        for line in self.channel.makefile_stderr("rb"):
            if line.rstrip(b"\n") == wire.ATTEMPT_END.encode():
                self.err_ended.set()
            else:
                self.err.write(line if line.endswith(b"\n") else line + b"\n")
        self.err_ended.set()
