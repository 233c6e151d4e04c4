"""The simulator's worker processes, from the benchmark's side: each runs a share of the clients (worker.py) from
its own loopback source address (127.0.1.W: a real pod has an address of its own, and each address has its own
range of ephemeral ports), and answers commands on a pipe within ``REPLY`` seconds."""

from __future__ import annotations

import multiprocessing
import signal
from collections import Counter
from collections.abc import Iterable
from typing import Any

from bench.pods_scale import worker

REPLY = 60.0  # a worker that answers no command within this is stuck: the benchmark ends


class Fleet:
    def __init__(self, workers: int, cfg: dict[str, Any], first_source: int = 1) -> None:
        ctx = multiprocessing.get_context("fork")  # the benchmark starts no thread before: nothing held in a child
        self.conns = []
        self.procs = []
        for w in range(workers):
            ours, theirs = ctx.Pipe()
            source = f"127.0.{first_source}.{w + 1}"
            proc = ctx.Process(target=worker.main, args=(theirs, source, dict(cfg)), daemon=True, name=f"sim{w}")
            proc.start()
            theirs.close()
            self.conns.append(ours)
            self.procs.append(proc)
        self.count = 0

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def add(self, role: str, dialect: str, clients: list[tuple[int, str, int]]) -> None:
        """Clients (index, host, node rank) of one kind, dealt out to the workers in turn."""
        shares: list[list[tuple[int, str, int]]] = [[] for _ in self.conns]
        for n, client in enumerate(clients):
            shares[n % len(shares)].append(client)
        self.call("add", per_worker=[{"role": role, "dialect": dialect, "clients": s} for s in shares])
        self.count += len(clients)

    def call(self, op: str, per_worker: list[dict[str, Any]] | None = None, **kw: Any) -> list[Any]:
        for n, conn in enumerate(self.conns):
            conn.send({"op": op, **kw, **(per_worker[n] if per_worker else {})})
        replies = []
        for n, conn in enumerate(self.conns):
            if not conn.poll(REPLY):
                raise TimeoutError(f"simulator worker {n} did not answer {op!r} within {REPLY:g} s")
            replies.append(conn.recv())
        return replies

    def query(self, q: str, arg: Any = None) -> dict[int, Any]:
        merged: dict[int, Any] = {}
        for reply in self.call("query", q=q, arg=arg):
            merged.update(reply)
        return merged

    def summary(self) -> dict[str, Any]:
        total: dict[str, Any] = {}
        for reply in self.call("query", q="summary"):
            for name, value in reply.items():
                if isinstance(value, Counter):
                    total.setdefault(name, Counter()).update(value)
                else:
                    total[name] = total.get(name, 0) + value
        return total

    def act(self, op: str, idx: Iterable[int]) -> float | None:
        """Tell the pods of ``idx`` to ``op``; when the last of them did it (monotonic), None if none is ours."""
        done = [t for t in self.call(op, idx=list(idx)) if isinstance(t, float)]
        return max(done) if done else None

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send({"op": "quit"})
            except OSError:
                pass
        for proc in self.procs:
            proc.join(2)
            if proc.is_alive() and proc.pid is not None:
                try:
                    import os

                    os.kill(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.join(2)
        for conn in self.conns:
            conn.close()
