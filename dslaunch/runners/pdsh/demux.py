"""pdsh's one stdout and stderr, split back into one line stream and one exit status per host.

pdsh writes every host's lines, labelled ``host: line``, into one pipe; its own stderr says when a host's ssh
client ended. ``PdshDemux`` reads both and gives each host a ``HostLines`` queue that never holds pdsh up: stalling
pdsh's one stdout for one host (a slow reader) would also hold back every other host's events, so up to a budget of
output waits in memory, more in a spill file (``output/lanes.py``), and events never wait behind it.

The two pipes are read by two threads, so the line saying a host's ssh ended can be read before that host's last
lines on stdout, which pdsh wrote first (a flood from another host ahead of them): the host is closed only once
stdout has been read up to where it stood when that line came.

A host's end-of-attempt marker on stderr sets ``err_ended``: its stderr lines are all in. ``for_job``: the agents live
for the job (runners/pdsh/dialback.py): a host's Done ends an attempt, not its stream.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import subprocess
import termios
import threading
import time

from dslaunch import wire
from dslaunch.job.result import START_FAILED
from dslaunch.output.lanes import ErrLane
from dslaunch.output.lanes import HeldLines as HostLines

_MARK = b"@dslaunch-"  # an event's start, and an attempt's end marker's (wire.ATTEMPT_END): each an item alone
READ = 1 << 20  # bytes per read of pdsh's stdout, and the size asked for its pipe
BATCH, BATCH_WAIT = 64 << 10, 0.002  # with less than BATCH bytes in the pipe, wait BATCH_WAIT seconds for more
_SSH_END = re.compile(
    r"^pdsh@[^:]*: (?P<host>[^:]+): ssh (?:exited with exit code (?P<code>[0-9]+)|killed by signal (?P<sig>[0-9]+))"
)


def _waiting(fd: int) -> int:
    """Bytes in the pipe, not read yet."""
    waiting = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, waiting)
    return int.from_bytes(waiting, "little")


class PdshDemux:
    """Reads pdsh's stdout/stderr and hands each host its own line stream and status."""

    def __init__(self, proc: subprocess.Popen[bytes], hosts: list[str], err: ErrLane, *, for_job: bool = False) -> None:
        self.proc = proc
        self.err = err  # our stderr (the runner's): the hosts' stderr lines go there
        self.for_job = for_job
        self.err_ended = {h: threading.Event() for h in hosts}
        self.queues = {h: HostLines() for h in hosts}
        self.status: dict[str, int] = {}
        self.closed: set[str] = set()
        self.stopped: set[str] = set()  # hosts whose ssh client we ended on purpose
        self.asked_to_stop: set[str] = set()  # hosts whose agent we told to stop: how its ssh ends is no news
        self.reported: set[str] = set()  # hosts whose agent sent its "done" event
        self.lock = threading.Lock()
        self.consumed = 0  # bytes read from pdsh's stdout so far
        self.processed = 0  # of those, bytes whose lines went to their hosts
        self.due: list[tuple[int, str, int]] = []  # (stdout offset, host, status): hosts to close once read that far
        self.eof = False
        # per host: its label prefix, where a line of another host starts, where an event line of its own starts
        self._runs = {
            h: (p, re.compile(b"\n(?!" + re.escape(p) + b")"), b"\n" + p + _MARK)
            for h, p in ((h, f"{h}: ".encode()) for h in hosts)
        }
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
        """pdsh's ``label: line`` stream, read in chunks and cut with bytes operations (``_cut``): consecutive
        output lines of one host go on as one item (a line at a time through the queue, the pump and the sink
        cost more than pdsh itself), events alone."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        held = b""
        poll = select.poll()
        poll.register(fd, select.POLLIN)
        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, READ)  # pdsh runs further ahead: fewer, larger reads
        except OSError:
            pass
        while chunk := self._read(fd, poll):
            data = held + chunk if held else chunk
            end = data.rfind(b"\n") + 1
            held = data[end:]  # at most one line, which pdsh cuts at 128 KiB
            self._cut(data[:end])
            self._close_due(len(chunk))
        with self.lock:
            self.eof = True
        self._close_due(0)
        code = self.proc.wait()
        for host in self.queues:
            self._close(host, code if code else START_FAILED)

    def _cut(self, block: bytes) -> None:
        """Whole lines: each host's output lines in the block to that host as one item, its label taken off every
        line (pdsh interleaves hosts every few lines: an item per run would cost a hand-over per few lines)."""
        pending: dict[str, list[bytes]] = {}
        pos = 0
        while pos < len(block):
            eol = block.index(b"\n", pos) + 1
            label = block.find(b": ", pos, eol)
            host = block[pos:label].decode("utf-8", "replace") if label >= 0 else ""
            if host not in self._runs or block.startswith(_MARK, label + 2):
                self._flush(host, pending.pop(host, None))  # the host's output before its event, in order
                rest = block[label + 2 : eol - 1] if label >= 0 else block[pos : eol - 1]
                self._line(block[pos : eol - 1], host, rest.decode("utf-8", "replace"))
                pos = eol
                continue
            prefix, other, event = self._runs[host]
            stop = other.search(block, pos)
            end = stop.start() + 1 if stop else len(block)
            marked = block.find(event, pos, end)
            end = marked + 1 if marked >= 0 else end
            pending.setdefault(host, []).append(block[pos + len(prefix) : end].replace(b"\n" + prefix, b"\n"))
            pos = end
        for host, parts in pending.items():
            self._flush(host, parts)

    def _flush(self, host: str, parts: list[bytes] | None) -> None:
        if parts:
            self._put(host, b"".join(parts).decode("utf-8", "replace"))

    def _read(self, fd: int, poll: select.poll) -> bytes:
        poll.poll()
        if _waiting(fd) < BATCH:
            time.sleep(BATCH_WAIT)  # pdsh writes a line at a time: let a few come, not a read (and hand-over) each
        with self.lock:  # with ``consumed``, as ``_ended`` reads it with what is still in the pipe
            chunk = os.read(fd, READ)
            self.consumed += len(chunk)
        return chunk

    def _ended(self, host: str, code: int) -> None:
        """``host``'s ssh client ended: close it once stdout has been read as far as pdsh had written it."""
        assert self.proc.stdout is not None
        with self.lock:
            at = self.consumed + (0 if self.eof else _waiting(self.proc.stdout.fileno()))
            if not self.eof and at > self.processed:
                self.due.append((at, host, code))
                return
        self._close(host, code)

    def _close_due(self, size: int) -> None:
        """The lines of the last ``size`` bytes read are with their hosts: close the hosts that waited for them."""
        with self.lock:
            self.processed += size
            due = [(host, code) for at, host, code in self.due if self.eof or at <= self.processed]
            self.due = [d for d in self.due if not (self.eof or d[0] <= self.processed)]
        for host, code in due:
            self._close(host, code)

    def _put(self, host: str, text: str) -> None:
        if host not in self.closed:
            self.queues[host].put(text)

    def _line(self, raw: bytes, host: str, rest: str) -> None:
        """A line that is not plain output of a known host: an event, or pdsh's own words."""
        if host not in self.queues:
            self.err.write(raw + b"\n")
            return
        if host in self.closed:
            return
        event = wire.decode(rest + "\n")
        self.queues[host].put(rest + "\n", urgent=event is not None)
        if isinstance(event, wire.Done):
            self.reported.add(host)
            if not self.for_job:
                self._close(host, event.code)

    def close_host(self, host: str, code: int) -> None:
        """End ``host``'s stream now (its agent's connection is gone: what pdsh still brings of it is too late)."""
        self._close(host, code)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace")
            match = _SSH_END.match(line)
            if match and match["host"] in self.queues:
                expected = any(match["host"] in known for known in (self.stopped, self.asked_to_stop, self.status))
                self._ended(match["host"], int(match["code"]) if match["code"] else 128 + int(match["sig"]))
                if expected or self.for_job:
                    continue  # we ended that ssh client, or its agent already reported (or, for the job, the launcher
                    # says what became of the host: a node lost, a spare dropped): not news
            host, sep, rest = line.partition(": ")
            if sep and host in self.err_ended and rest.rstrip("\n") == wire.ATTEMPT_END:
                self.err_ended[host].set()
                continue
            ours = sep and host in self.queues and (rest.startswith("[") or rest.rstrip("\n") == wire.FLUSH_LINE)
            self.err.write((rest if ours else line).encode())

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
