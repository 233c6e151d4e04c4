"""A process that runs thousands of simulated clients (client.py) on one selectors loop, and answers the
benchmark's commands on a pipe (fleet.py): add clients, start them, drop or silence one, recreate it, ask the
Slurm tasks to propose, and queries of what each client saw (times on ``time.monotonic``, which every process
of the machine shares). No thread per client: one loop, a timer heap, a sweep for silent links."""

from __future__ import annotations

import heapq
import resource
import selectors
import signal
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from bench.pods_scale import dialects
from bench.pods_scale.client import DONE, GONE, JOINED, RUNNING, Client

SWEEP = 0.25  # how often links are checked for silence (link.SILENT is 4 s)


def raise_nofile(want: int = 1 << 20) -> int:
    """The open files soft limit as high as the hard one allows (as root, the hard one too, up to ``nr_open``)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        with open("/proc/sys/fs/nr_open") as f:
            want = min(want, int(f.read()))
    except (OSError, ValueError):
        pass
    for limit in ((want, max(hard, want)), (hard, hard)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, limit)
            return limit[0]
        except (ValueError, OSError):
            continue
    return soft


class Worker:
    def __init__(self, conn: Connection, source: str, cfg: dict[str, Any]) -> None:
        self.conn, self.source, self.cfg = conn, source, cfg
        self.sel = selectors.DefaultSelector()
        self.sel.register(conn.fileno(), selectors.EVENT_READ, None)
        self.timers: list[tuple[float, int, Client, str, int]] = []
        self.seq = 0
        self.clients: dict[int, Client] = {}
        self.alive = True
        self.offset = time.time() - time.monotonic()

    # ---- the loop a client needs (client.Loop) ----
    def watch(self, client: Client, events: int) -> None:
        assert client.sock is not None
        try:
            self.sel.modify(client.sock, events, client)
        except KeyError:
            self.sel.register(client.sock, events, client)

    def unwatch(self, client: Client) -> None:
        try:
            self.sel.unregister(client.sock)  # type: ignore[arg-type]
        except (KeyError, ValueError):
            pass

    def at(self, when: float, client: Client, kind: str, gen: int) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (when, self.seq, client, kind, gen))

    def run(self) -> None:
        next_sweep = time.monotonic() + SWEEP
        while self.alive:
            now = time.monotonic()
            self.offset = time.time() - now
            wait = min(next_sweep, self.timers[0][0] if self.timers else next_sweep) - now
            ready = self.sel.select(max(0.0, min(wait, 0.05)))
            for key, mask in ready:  # every ready pod's lines read first, each with its arrival time (Client.fetch)
                if key.data is not None:
                    key.data.fetch(mask)
            for key, mask in ready:
                if key.data is None:
                    self._command(self.conn.recv())
                else:
                    key.data.ready(mask, time.monotonic())
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                _when, _seq, client, kind, gen = heapq.heappop(self.timers)
                client.timer(kind, gen, now)
            if now >= next_sweep:
                next_sweep = now + SWEEP
                for client in self.clients.values():
                    client.check_silence(now)

    # ---- commands -------------------------------------------------------------------------------------------
    def _command(self, cmd: dict[str, Any]) -> None:
        op = cmd["op"]
        now = time.monotonic()
        reply: Any = True
        if op == "add":
            dialect = dialects.BY_NAME[cmd["dialect"]]()
            for idx, host, node_rank in cmd["clients"]:
                self.clients[idx] = Client(self, idx, dialect, host, node_rank, role=cmd["role"])
        elif op == "start":  # at once, or spread over ``spread`` seconds (by index, the same every run)
            for client in self.clients.values():
                client.start(now, cmd.get("spread", 0.0) * ((client.idx * 0.618034) % 1.0))
        elif op in ("drop", "silence", "revive"):
            mine = [self.clients[i] for i in cmd["idx"] if i in self.clients]
            for client in mine:
                client.drop() if op == "drop" else client.go_silent() if op == "silence" else client.revive(now)
            reply = now if mine else None  # when it was done: this worker may be seconds behind the ask
        elif op == "propose":
            self.cfg["proposing"] = True
            for client in self.clients.values():
                client.propose()
        elif op == "query":
            reply = self._summary() if cmd["q"] == "summary" else self._query(cmd["q"], cmd.get("arg"))
        elif op == "quit":
            self.alive = False
        self.conn.send(reply)

    def _query(self, q: str, arg: Any) -> dict[int, Any]:
        """Each client's ``q``: when it first tried, its tries, its first welcome, when it started attempt ``arg``
        (or was told it stands by for it), when it heard node ``arg[1]`` lost in attempt ``arg[0]``, its stop step
        and when it came, its node rank."""
        read: Callable[[Client], Any] = {
            "first_try": lambda c: c.first_try,
            "tries": lambda c: c.tries,
            "joined": lambda c: c.joined_at[0] if c.joined_at else None,
            "started": lambda c: c.started.get(arg),
            "standby": lambda c: c.standby.get(arg),
            "standing_by": lambda c: min(c.standby.values()) if c.standby and c.state != RUNNING else None,
            "lost": lambda c: c.lost.get(tuple(arg)),
            "stop_at": lambda c: c.stop_at,
            "node": lambda c: c.node,
            "latest": lambda c: (*max(c.started.items()), c.state == RUNNING) if c.started else None,
            "log": lambda c: c.log,
        }[q]
        return {c.idx: read(c) for c in self.clients.values()}

    def _summary(self) -> dict[str, Any]:
        cs = list(self.clients.values())
        names = {DONE: "done", GONE: "gone", JOINED: "joined", RUNNING: "running"}
        ends: Counter[str] = Counter()
        for c in cs:
            ends.update(c.ends)
        return {
            "states": Counter(names.get(c.state, "joining") for c in cs),
            "gave_up": Counter(c.gave_up for c in cs if c.gave_up),
            "ends": ends,
            "coordinator_lost": sum(len(c.coordinator_lost) for c in cs),
            "lost_heard": Counter(n for c in cs for _a, n in c.lost),
            "relays": sum(c.relays for c in cs),
            "tries": sum(c.tries for c in cs),
        }


def main(conn: Connection, source: str, cfg: dict[str, Any]) -> None:
    from dslaunch.oslib import prctl

    prctl.set_parent_death_signal(signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the benchmark ends us (quit, or SIGKILL at its end)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the benchmark's handler (multiprocessing ends us with it)
    raise_nofile()
    Worker(conn, source, cfg).run()
