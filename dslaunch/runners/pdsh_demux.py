"""pdsh's one stdout and stderr, split back into one line stream and one exit status per host.

pdsh writes every host's lines, labelled ``host: line``, into one pipe; its own stderr says when a host's ssh
client ended. ``PdshDemux`` reads both and gives each host a ``HostLines`` queue that never holds pdsh up.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import threading
from typing import IO

from dslaunch import wire
from dslaunch.remote import common

_SSH_END = re.compile(
    r"^pdsh@[^:]*: (?P<host>[^:]+): ssh (?:exited with exit code (?P<code>[0-9]+)|killed by signal (?P<sig>[0-9]+))"
)


class HostLines:
    """One host's lines on their way to the launcher, never holding up pdsh's single stdout.

    pdsh writes every host's lines into one pipe, so stalling it for one host (a slow reader) would also
    hold back every other host's events: a failure would go unnoticed. So the pipe is always drained:
    up to ``budget`` bytes of output wait in memory, more go to a spill file (deleted when closed) and
    are passed on in order once the reader catches up. Events never wait behind spilled output.
    """

    def __init__(self, budget: int = 4 << 20) -> None:
        self.items: collections.deque[str] = collections.deque()
        self.size = 0
        self.budget = budget
        self.ended = False
        self.spill: IO[bytes] | None = None
        self.spilled = 0  # bytes written to the spill file
        self.unspilled = 0  # bytes of it passed on
        self.cond = threading.Condition()

    def put(self, item: str | None, *, urgent: bool = False) -> None:
        """Output, an event (``urgent``), or None: the end, after everything already put."""
        with self.cond:
            if item is None:
                self.ended = True
            elif urgent or (self.spilled == self.unspilled and self.size + len(item) <= self.budget):
                self.items.append(item)
                self.size += len(item)
            else:
                self._spill(item.encode())
            self.cond.notify_all()

    def _spill(self, data: bytes) -> None:
        if self.spill is None:
            import tempfile

            self.spill = tempfile.TemporaryFile(prefix="dslaunch-pdsh-")
        record = len(data).to_bytes(4, "big") + data
        os.pwrite(self.spill.fileno(), record, self.spilled)
        self.spilled += len(record)

    def get(self) -> str | None:
        with self.cond:
            while not self.items and self.spilled == self.unspilled and not self.ended:
                self.cond.wait()
            if self.items:
                item = self.items.popleft()
                self.size -= len(item)
                return item
            if self.spill is not None and self.unspilled < self.spilled:
                fd = self.spill.fileno()
                length = int.from_bytes(os.pread(fd, 4, self.unspilled), "big")
                data = os.pread(fd, length, self.unspilled + 4)
                self.unspilled += 4 + length
                return data.decode("utf-8", "replace")
            if self.spill is not None:
                self.spill.close()
                self.spill = None
            return None


class PdshDemux:
    """Reads pdsh's stdout/stderr and hands each host its own line stream and status."""

    def __init__(self, proc: subprocess.Popen[bytes], hosts: list[str]) -> None:
        self.proc = proc
        self.queues = {h: HostLines() for h in hosts}
        self.status: dict[str, int] = {}
        self.closed: set[str] = set()
        self.stopped: set[str] = set()  # hosts whose ssh client we ended on purpose
        self.reported: set[str] = set()  # hosts whose agent sent its "done" event
        self.lock = threading.Lock()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _close(self, host: str, code: int | None) -> None:
        with self.lock:
            if code is not None:
                self.status.setdefault(host, code)
            if host in self.closed:
                return
            self.closed.add(host)
        self.queues[host].put(None, urgent=True)

    def _read_stdout(self) -> None:
        """pdsh's ``label: line`` stream, read in chunks: consecutive output lines of one host go on as one item
        (a line at a time through the queue, the pump and the sink cost more than pdsh itself), events alone."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        held = b""
        while chunk := os.read(fd, 1 << 16):
            *lines, held = (held + chunk).split(b"\n")  # held: at most one line, which pdsh cuts at 128 KiB
            run_host, run = "", []  # type: tuple[str, list[str]]
            for raw in lines:
                host, sep, rest = raw.decode("utf-8", "replace").partition(": ")
                if not sep or host not in self.queues or rest.startswith(wire.MARKER):
                    if run:
                        self._put(run_host, "".join(run))
                        run = []
                    self._line(raw, host if sep else "", rest)
                    continue
                if host != run_host and run:
                    self._put(run_host, "".join(run))
                    run = []
                run_host = host
                run.append(rest + "\n")
            if run:
                self._put(run_host, "".join(run))
        code = self.proc.wait()
        for host in self.queues:
            self._close(host, code if code else common.START_FAILED)

    def _put(self, host: str, text: str) -> None:
        if host not in self.closed:
            self.queues[host].put(text)

    def _line(self, raw: bytes, host: str, rest: str) -> None:
        """A line that is not plain output of a known host: an event, or pdsh's own words."""
        if host not in self.queues:
            common.write_err(raw + b"\n")
            return
        if host in self.closed:
            return
        event = wire.decode(rest + "\n")
        self.queues[host].put(rest + "\n", urgent=event is not None)
        if isinstance(event, wire.Done):
            self.reported.add(host)
            self._close(host, event.code)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            match = _SSH_END.match(line)
            if match and match["host"] in self.queues:
                expected = match["host"] in self.stopped or match["host"] in self.status
                self._close(match["host"], int(match["code"]) if match["code"] else 128 + int(match["sig"]))
                if expected:
                    continue  # we ended that ssh client, or its agent already reported: not news
            host, sep, rest = line.partition(": ")
            common.write_err((rest if sep and host in self.queues and rest.startswith("[") else line).encode())

    def ssh_client(self, host: str) -> int | None:
        """The pid of the ssh client pdsh runs for ``host`` as named on its command line."""
        import psutil

        try:
            for child in psutil.Process(self.proc.pid).children():
                cmdline = child.cmdline()
                if cmdline and os.path.basename(cmdline[0]) == "ssh" and host in cmdline:
                    return child.pid
        except psutil.Error:
            pass
        return None
