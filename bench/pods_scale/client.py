"""One simulated client on a non-blocking socket: a member pod, a Slurm task, a dial-back agent or a flood client.

It says on the wire what the real one says, with the project's own code: ``channel.handshake`` for the hello, the
answer (with the pod's shape), the welcome's check and the session keys; ``channel.link.Sealer`` for every line
after, heartbeats each ``HEARTBEAT``; ``wire`` and ``pods.messages`` for the events and the coordinator's
messages. A pod does at each attempt what a member pod's launcher and agent send (``pods/member.py``'s
``Forwarding``; ``agent/node_state.py``): ``Spawned`` per rank at the start; at a fail-fast ``stop`` each rank's
exit by the agent and ``Done``; at a requested stop ``StopAsked``, its ``StopStep`` proposal, and once the
coordinator's ``stop_at`` comes the ranks' exits and ``Done``; after ``end`` it joins again unless it was the last.
A coordinator lost mid-attempt: it joins again while ``--max-restarts`` allows (as ``PodLauncher.join`` decides).
Only the I/O differs from the real clients: this runs thousands to a process (``worker.py``).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
import time
from typing import Any, Protocol

from bench.pods_scale.dialects import Dialect
from dslaunch import wire
from dslaunch.channel import handshake
from dslaunch.channel.link import HEARTBEAT, MAX_LINE, SILENT, TAG, Sealer
from dslaunch.pods import messages
from dslaunch.wire_check import Malformed

NEW, WAIT, CONNECTING, GREETING, ANSWERED, JOINED, RUNNING, DONE, GONE = range(9)
HB = b'{"t":"hb"}'
_MARK = wire.MARKER.encode()
_EXIT = _MARK + b'{"ev":"exit",'  # wire.encode puts the kind first
_BEFORE_START = {k: messages.FROM_COORDINATOR[k] for k in ("start", "standby", "end", "refused")}
_IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: the port is picked at connect(), per destination
_SO_TIMESTAMPNS = 35  # asm-generic/socket.h: each read says when its last bytes arrived
_ANCILLARY = socket.CMSG_SPACE(16)
_RECV = 1 << 16  # a read's bytes share one arrival time (its last): small reads keep it close
STOP_BASE = 1000  # a pod's proposed stop step: STOP_BASE + its index % 7 (the job's: the largest)


class Loop(Protocol):
    """What a client needs of its worker (worker.py)."""

    cfg: dict[str, Any]
    source: str
    offset: float  # time.time() - time.monotonic(), now

    def watch(self, client: Client, events: int) -> None: ...
    def unwatch(self, client: Client) -> None: ...
    def at(self, when: float, client: Client, kind: str, gen: int) -> None: ...


class Client:
    def __init__(self, loop: Loop, idx: int, dialect: Dialect, host: str, node_rank: int, *, role: str) -> None:
        self.loop, self.idx, self.dialect, self.host, self.role = loop, idx, dialect, host, role
        self.fixed_rank = node_rank  # a fixed job's node rank; -1 for an elastic pod
        self.asked, self.node, self.seen, self.attempt = node_rank, node_rank, -1, -1
        self.state, self.gen = NEW, 0
        self.sock: socket.socket | None = None
        self.buf, self.out = b"", b""
        self.seal: Sealer | None = None
        self.unseal: Sealer | None = None
        self.client_nonce = self.server_nonce = ""
        self.tries, self.first_try, self.deadline = 0, 0.0, 0.0
        self.wait = dialect.retry[0]
        self.last_heard = 0.0
        self.silent = False
        self.fetched: list[tuple[bytes, list[tuple[int, int, bytes]]]] | None = None  # read, not yet acted on
        self.stopping: int | None = None  # the requested stop's signal, once asked
        # what the benchmark reads (worker.py's queries)
        self.joined_at: list[float] = []
        self.started: dict[int, float] = {}
        self.standby: dict[int, float] = {}
        self.lost: dict[tuple[int, int], float] = {}  # (attempt, node rank) -> when it was heard lost
        self.relays = 0
        self.stop_at: tuple[int, float] | None = None
        self.gave_up = ""
        self.ends: dict[str, int] = {}
        self.coordinator_lost: list[tuple[float, str]] = []
        self.log: list[tuple[float, str]] | None = [] if loop.cfg.get("trace") else None  # what happened, when

    def note(self, what: str) -> None:
        if self.log is not None:
            self.log.append((time.monotonic(), what))

    # ---- connecting -----------------------------------------------------------------------------------------
    def begin(self, now: float) -> None:
        """One try: a new connection (the first try also starts this client's join deadline)."""
        if self.tries == 0 or self.state in (NEW, DONE):
            self.deadline = now + self.loop.cfg["join_timeout"]
        if not self.first_try:
            self.first_try = now
        self.note("try")
        self.tries += 1
        self.gen += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        if self.role != "flood":
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        try:
            if self.loop.source:
                sock.setsockopt(socket.SOL_IP, _IP_BIND_ADDRESS_NO_PORT, 1)
                sock.bind((self.loop.source, 0))
            err = sock.connect_ex(tuple(self.loop.cfg["address"]))
        except OSError as exc:
            err = exc.errno or errno.EIO
        if err not in (0, errno.EINPROGRESS):
            sock.close()
            self._failed(now, f"connect: {os.strerror(err)}")
            return
        self.sock, self.state, self.buf, self.out = sock, CONNECTING, b"", b""
        self.loop.watch(self, 2)  # EVENT_WRITE: connected, or failed
        self.loop.at(now + self.dialect.connect_timeout, self, "deadline", self.gen)

    def start(self, now: float, after: float) -> None:
        """The pod's launcher starts ``after`` seconds from now."""
        if after <= 0:
            self.begin(now)
            return
        self.state = WAIT
        self.deadline = now + after + self.loop.cfg["join_timeout"]
        self.loop.at(now + after, self, "try", self.gen)

    def fetch(self, mask: int) -> None:
        """A worker's first pass over its ready sockets: what waits is read before any pod acts on its lines, so
        that a line is not left unread while the worker sends (TCP merges an unread line with the next one to come,
        arrival time included: a line read seconds late took the time of the one after it)."""
        if mask & 1 and self.state != CONNECTING and self.sock is not None:
            self.fetched = self._reads()

    def ready(self, mask: int, now: float) -> None:
        fetched, self.fetched = self.fetched, None  # a pod dropped since its fetch: what it read is gone with it
        if self.state == CONNECTING:
            self._connected(now)
            return
        if mask & 2 and self.out:
            self._flush()
        if mask & 1 and self.sock is not None:
            for data, ancillary in fetched if fetched is not None else self._reads():
                self._take(data, ancillary, now)

    def timer(self, kind: str, gen: int, now: float) -> None:
        if gen != self.gen:
            return
        if kind == "try" and self.state == WAIT:
            self.begin(now)
        elif kind == "deadline" and self.state in (CONNECTING, GREETING, ANSWERED):
            self._failed(now, "timed out", answered=self.state == ANSWERED)
        elif kind == "startby" and self.state == JOINED and not self.standby and self.role == "pod":
            self._give_up("the other pods did not all join in time")
        elif kind == "step" and self.state == RUNNING and not self.silent:
            signum = self.stopping or 15
            self._ranks_end(0, None, False, wire.Done(self.node, 128 + signum, signum, time.time()))
        elif kind == "hb" and self.state in (JOINED, RUNNING) and not self.silent:
            self.send_lines([HB])
            self.loop.at(now + HEARTBEAT, self, "hb", gen)

    def _connected(self, now: float) -> None:
        assert self.sock is not None
        err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._failed(now, f"connect: {os.strerror(err)}")
            return
        self.gen += 1
        self.state = GREETING
        self.loop.watch(self, 1)
        if self.role == "flood":
            return
        self.loop.at(now + self.dialect.handshake_time, self, "deadline", self.gen)
        if self.dialect.hello_first:
            self.client_nonce = handshake.nonce()
            self._send(handshake.hello(self.loop.cfg["key"], self.loop.cfg["run_id"], self.client_nonce))

    def _failed(self, now: float, why: str, *, answered: bool = False) -> None:
        """This try failed: another after the wait, while the join's time and the tries last."""
        self._close()
        self.note(f"failed: {why}")
        self.ends[why] = self.ends.get(why, 0) + 1
        if answered and self.dialect.answer_eof_gives_up:
            self._give_up(f"closed after the answer ({why})")
            return
        if (self.dialect.tries and self.tries >= self.dialect.tries) or now + self.wait >= self.deadline:
            self._give_up(f"no join: {why}")
            return
        self.state = WAIT
        self.loop.at(now + self.wait, self, "try", self.gen)
        self.wait = min(self.dialect.retry[1], self.wait * 2) if self.wait else 0.0

    def _give_up(self, why: str) -> None:
        self.note(f"gave up: {why}")
        self._close()
        self.state, self.gave_up = DONE, why

    def _close(self) -> None:
        if self.sock is not None:
            self.loop.unwatch(self)
            self.sock.close()
            self.sock = None
        self.gen += 1

    # ---- bytes in and out -----------------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        if self.sock is None or self.silent:
            return
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError:
            return  # the reader sees the end
        if sent < len(data):
            self.out = data[sent:]
            self.loop.watch(self, 3)

    def _flush(self) -> None:
        assert self.sock is not None
        try:
            sent = self.sock.send(self.out)
        except BlockingIOError:
            return
        except OSError:
            self.out = b""
            return
        self.out = self.out[sent:]
        if not self.out:
            self.loop.watch(self, 1)

    def send_lines(self, payloads: list[bytes]) -> None:
        """Whole lines, each sealed (``Sealer``) where the dialect seals."""
        seal = self.seal
        self._send(b"".join(seal.seal(p) if seal is not None else p + b"\n" for p in payloads))

    def _reads(self) -> list[tuple[bytes, list[tuple[int, int, bytes]]]]:
        """What waits in the socket, each read with the kernel's arrival time (``_take`` acts on them)."""
        assert self.sock is not None
        if self.state == RUNNING and self.role == "pod" and not self.silent:
            try:
                waiting = self.sock.recv(_RECV, socket.MSG_PEEK)
            except BlockingIOError:
                return []
            except OSError:
                waiting = b""
            if waiting.count(b"\n") > 1:  # lines this loop was slow to read: each its own arrival time
                return self._read_apart(waiting)
        try:
            data, ancillary, _flags, _addr = self.sock.recvmsg(_RECV, _ANCILLARY)
        except BlockingIOError:
            return []
        except OSError:
            data, ancillary = b"", []
        return [(data, ancillary)]

    def _read_apart(self, waiting: bytes) -> list[tuple[bytes, list[tuple[int, int, bytes]]]]:
        """Read what waits one line at a time: a read's arrival time is that of its last bytes, so a line read
        with the next (a heartbeat up to 1 s later) took the later one's time."""
        assert self.sock is not None
        start, got = 0, []
        while (cut := waiting.find(b"\n", start)) >= 0:
            try:
                data, ancillary, _flags, _addr = self.sock.recvmsg(cut + 1 - start, _ANCILLARY)
            except OSError:
                break
            start = cut + 1
            got.append((data, ancillary))
        return got

    def _take(self, data: bytes, ancillary: list[tuple[int, int, bytes]], now: float) -> None:
        arrived = now
        for _level, kind, stamp in ancillary:  # when the last of these bytes reached the socket (kernel's clock)
            if kind == _SO_TIMESTAMPNS and len(stamp) >= 16:
                sec, nsec = struct.unpack("qq", stamp[:16])
                arrived = min(now, sec + nsec / 1e9 - self.loop.offset)
        if self.silent:
            return  # powered off: nothing it reads matters
        if self.role == "flood":
            if not data:
                self._ended(now, "dropped")
            return  # says nothing, answers nothing
        if not data and self.state in (GREETING, ANSWERED):
            self._failed(now, "closed in the handshake", answered=self.state == ANSWERED)
            return
        if not data:
            self._ended(now, "dropped")
            return
        self.last_heard = now
        self.buf += data
        if self.state in (GREETING, ANSWERED):
            self._handshake(arrived)
        if self.state in (JOINED, RUNNING):
            self._lines(arrived)

    # ---- the handshake (channel/handshake.py, as pods/member.open_link and dialback_client._handshake) ----------
    def _handshake(self, now: float) -> None:
        cfg = self.loop.cfg
        while self.state in (GREETING, ANSWERED) and b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            if self.state == GREETING:
                self.server_nonce = handshake.read_challenge(line) or ""
                if not self.server_nonce:
                    refused = _refusal(line)
                    self._give_up(refused) if refused else self._failed(now, "no challenge")
                    return
                if not self.dialect.hello_first:
                    self.client_nonce = handshake.nonce()
                shape = cfg["shape"] if self.dialect.shape else None
                me = (self.asked, self.host, self.seen)
                self._send(
                    handshake.answer(cfg["key"], cfg["run_id"], me, self.server_nonce, self.client_nonce, shape=shape)
                )
                self.state = ANSWERED
            elif handshake.check_welcome(cfg["key"], cfg["run_id"], self.server_nonce, self.client_nonce, line):
                self._welcomed(now)
            else:
                self._give_up(_refusal(line) or "the welcome did not prove the secret")
                return
        if self.state in (GREETING, ANSWERED) and len(self.buf) > handshake.MAX_LINE:
            self._failed(now, "a handshake line over the bound", answered=self.state == ANSWERED)

    def _welcomed(self, now: float) -> None:
        self.joined_at.append(now)
        self.note("welcome")
        self.gen += 1  # the handshake's deadline no longer applies
        self.state, self.last_heard, self.wait = JOINED, now, self.dialect.retry[0]
        if self.dialect.sealed:
            cfg = self.loop.cfg
            to_client, to_server = handshake.session_keys(
                cfg["key"], cfg["run_id"], self.server_nonce, self.client_nonce
            )
            self.seal, self.unseal = Sealer(to_server), Sealer(to_client)
            self.loop.at(now + HEARTBEAT * (0.5 + (self.idx % 97) / 97), self, "hb", self.gen)
            self.loop.at(self.deadline, self, "startby", self.gen)
        else:
            self.seal = self.unseal = None
        if self.role == "task" and self.loop.cfg.get("proposing"):
            self.propose()

    # ---- the link (channel/link.Link.lines) -------------------------------------------------------------------
    def _lines(self, now: float) -> None:
        limit = MAX_LINE + (TAG if self.unseal is not None else 0)
        fast = self.unseal is not None and not self.loop.cfg["check"]
        buf, pos = self.buf, 0
        while self.state in (JOINED, RUNNING):
            cut = buf.find(b"\n", pos)
            if cut < 0:
                break
            raw, pos = buf[pos:cut], cut + 1
            if len(raw) > limit:
                self._ended(now, "oversized")
                return
            if fast and raw.startswith(_EXIT):  # another pod's rank exit, relayed: counted, its MAC not checked
                self.unseal.seq += 1  # type: ignore[union-attr]
                self.relays += 1
                continue
            payload = raw if self.unseal is None else self.unseal.open(raw)
            if payload is None:
                self._ended(now, "forged")
                return
            if payload != HB:
                self._message(payload, now)
        if self.state not in (JOINED, RUNNING):
            return
        self.buf = buf[pos:]
        if len(self.buf) > limit:
            self._ended(now, "oversized")

    def check_silence(self, now: float) -> None:
        """Nothing heard for ``link.server_silent`` (``SILENT`` up to 4,096 pods): the link ends, as a real link's
        read times out. Bytes waiting unread in the socket count as heard: a real pod reads on a thread of its own,
        this loop may be behind."""
        silent = self.loop.cfg.get("silent", SILENT)
        if self.unseal is None or self.state not in (JOINED, RUNNING) or now - self.last_heard <= silent:
            return
        assert self.sock is not None
        try:
            waiting = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            waiting = b""
        if waiting:
            self.last_heard = now
        else:
            self._ended(now, "silent")

    def _ended(self, now: float, why: str) -> None:
        """The link ended (``why`` as ``Link.why``): what the real client does next."""
        self._close()
        self.note(f"link ended: {why}")
        self.ends[why] = self.ends.get(why, 0) + 1
        if self.role == "flood":  # back after a moment
            self.state = WAIT
            self.loop.at(now + self.dialect.retry[0], self, "try", self.gen)
            return
        if self.role != "pod" or self.silent:
            self.state = DONE
            return
        if self.state == JOINED:  # before the start: a standby joins again (Orphaned); any other pod gives up
            if self.standby:
                self._rejoin(now)
            else:
                self._give_up(f"the coordinator's connection ended ({why}) before the start")
            return
        self.coordinator_lost.append((now, why))
        if not self.stopping and self.attempt + 1 <= self.loop.cfg["max_restarts"]:  # a requested stop never restarts
            self._rejoin(now)
        else:
            self.state = DONE

    def _rejoin(self, now: float) -> None:
        """The next attempt: a new connection, the last attempt it took part in said (``seen``)."""
        self._close()
        self.seen = max(self.seen, self.attempt)
        self.asked = self.fixed_rank if self.fixed_rank >= 0 else self.node
        self.stopping, self.seal, self.unseal, self.tries = None, None, None, 0
        self.state, self.wait = WAIT, self.dialect.retry[0]
        self.begin(now)

    # ---- what a pod, a task or an agent does with a message ---------------------------------------------------
    def _message(self, payload: bytes, now: float) -> None:
        if self.role == "task":
            self._task_message(payload, now)
        elif self.role == "pod":
            if self.state == JOINED:
                self._before_start(payload, now)
            elif payload.startswith(_MARK):
                self._relay(payload, now)
            else:
                self._control(payload, now)

    def _malformed(self, now: float, exc: Malformed) -> None:
        self.ends[f"malformed: {exc}"[:80]] = self.ends.get(f"malformed: {exc}"[:80], 0) + 1
        self._ended(now, "malformed")

    def _before_start(self, payload: bytes, now: float) -> None:
        try:
            message = messages.control(payload, _BEFORE_START)
        except Malformed as exc:
            self._malformed(now, exc)
            return
        kind = message["t"]
        if kind == "start":
            self._start(message, now)
        elif kind == "standby":
            self.note(f"standby {message['attempt']}")
            self.standby.setdefault(message["attempt"], now)
        elif kind in ("end", "refused"):
            self._give_up(f"{kind} before the start: {message.get('why', message.get('code'))}")

    def _start(self, message: dict[str, Any], now: float) -> None:
        self.state, self.attempt, self.node = RUNNING, message["attempt"], message["node_rank"]
        self.started[self.attempt] = now
        self.note(f"start {self.attempt} as node {self.node}")
        self.standby.clear()
        rpp, pid = self.loop.cfg["ranks_per_pod"], 100000 + self.idx
        events = [wire.Spawned(self.node * rpp + i, i, pid + i, self.host) for i in range(rpp)]
        self.send_lines([messages.encoded(e)[:-1] for e in events])

    def _relay(self, payload: bytes, now: float) -> None:
        """Another pod's rank exit or loss. Cheap by default (the figure is when it came, and the real pod's check
        runs on its own cores); ``check``: the pod's own decoder (``messages.from_coordinator``)."""
        self.relays += 1
        if self.loop.cfg["check"]:
            try:
                event = messages.from_coordinator(payload.decode(), self.node)
            except Malformed as exc:
                self._malformed(now, exc)
                return
            if isinstance(event, wire.NodeLost):
                self.lost.setdefault((self.attempt, event.node_rank), now)
            return
        if b'"ev":"lost"' in payload[: len(_MARK) + 12]:  # a rank's exit is only counted
            obj = json.loads(payload[len(_MARK) :])
            self.lost.setdefault((self.attempt, obj["node_rank"]), now)

    def _control(self, payload: bytes, now: float) -> None:
        try:
            message = messages.control(payload, messages.FROM_COORDINATOR)
        except Malformed as exc:
            self._malformed(now, exc)
            return
        kind = message["t"]
        self.note(f"control {kind}")
        if kind == "stop" and "signum" in message and self.stopping is None:  # a requested stop: propose a step
            self.stopping = message["signum"]
            asked = wire.StopAsked(self.node, self.stopping, time.time())
            proposal = wire.StopStep(self.node, STOP_BASE + self.idx % 7)
            self.send_lines([messages.encoded(asked)[:-1], messages.encoded(proposal)[:-1]])
        elif kind == "stop" and self.stopping is None:  # fail-fast: the agent tears its ranks down
            self.stopping = 0
            self._ranks_end(143, "SIGTERM", True, wire.Done(self.node, 143))
        elif kind == "stop_at":
            if self.stop_at is None:  # the ranks stop when they reach the step, a step or two from now
                self.stop_at = (message["step"], now)
                self.loop.at(time.monotonic() + self.loop.cfg.get("step_time", 0.0), self, "step", self.gen)
        elif kind == "end":
            self._close()
            if message["last"]:
                self.state = DONE
            else:
                self._rejoin(now)

    def _ranks_end(self, code: int, sig: str | None, by_agent: bool, done: wire.Done) -> None:
        rpp, pid, wall = self.loop.cfg["ranks_per_pod"], 100000 + self.idx, time.time()
        exits = [
            wire.RankExit(self.node * rpp + i, i, self.node, self.host, pid + i, code, sig, wall, by_agent)
            for i in range(rpp)
        ]
        events: list[wire.Event] = [*exits, done]
        self.send_lines([messages.encoded(e)[:-1] for e in events])

    def propose(self) -> None:
        """A Slurm task's proposal for attempt 0 (stop_channel.Spoke.propose)."""
        if self.state in (JOINED, RUNNING):
            line = json.dumps({"t": "propose", "attempt": 0, "step": STOP_BASE + self.idx % 7}).encode()
            self.send_lines([line])

    def _task_message(self, payload: bytes, now: float) -> None:
        from dslaunch.runners.slurm.stop_channel import FROM_NODE0

        try:
            message = messages.control(payload, FROM_NODE0)
        except Malformed as exc:
            self._malformed(now, exc)
            return
        if self.stop_at is None:
            self.stop_at = (message["step"], now)

    # ---- the benchmark's hands --------------------------------------------------------------------------------
    def drop(self) -> None:
        """A deleted pod: its connection closes."""
        self._close()
        self.state = GONE

    def go_silent(self) -> None:
        """A pod powered off or cut off: nothing more is sent or read; the connection stays open."""
        self.silent = True
        if self.sock is not None:
            self.loop.unwatch(self)
        self.state = GONE

    def revive(self, now: float) -> None:
        """The pod recreated: a new launcher (no attempt seen), the same node rank in a fixed job."""
        self._close()
        self.silent, self.seen, self.attempt, self.node = False, -1, -1, self.fixed_rank
        self.state, self.tries, self.first_try = NEW, 0, 0.0
        self._rejoin(now)
        self.seen = -1


def _refusal(raw: bytes) -> str:
    try:
        refused = messages.control(raw, {"refused": messages.FROM_COORDINATOR["refused"]})
    except Malformed:
        return ""
    return f"refused: {refused['why']}"
