"""The figures of the two other control channels: Slurm's stop channel across many tasks, and the dial-back of
many agents under a flood (servers.py has their servers)."""

from __future__ import annotations

import os
import time
from typing import Any

from bench.pods_scale.client import STOP_BASE
from bench.pods_scale.coordinator import usage
from bench.pods_scale.fleet import Fleet
from bench.pods_scale.servers import Server, free_port

POLL = 0.1


def _wait(done: Any, timeout: float, guard: Any = None) -> bool:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        if guard is not None:
            guard()
        time.sleep(POLL)
    return True


def _thread_guard(pid: int, cap: int, seen: dict[str, Any]) -> Any:
    def guard() -> None:
        used = usage(pid)
        if used is None:
            raise RuntimeError("the server exited")
        seen["threads_peak"] = max(seen.get("threads_peak", 0), used.threads)
        if used.threads > cap:
            raise RuntimeError(f"the server has {used.threads} threads, past the guard of {cap}")

    return guard


def _settled(fleet: Fleet, count: int) -> bool:
    """Every client has joined or given up."""
    states = fleet.summary()["states"]
    return bool(states.get("joining", 0) == 0 and sum(states.values()) == count)


def slurm_stop_channel(tasks: int, workers: int, max_threads: int) -> dict[str, Any]:
    """Node 0's Hub and ``tasks - 1`` other tasks: every task connected (from the last one's first try), then every
    node proposes at once: the time until every task has the job's step, and whether it is the largest proposal."""
    run_id, key = f"benchslurm{os.getpid()}", os.urandom(32)
    figures: dict[str, Any] = {"tasks": tasks}
    server = Server("hub", run_id, key, [str(tasks), str(free_port())])
    cfg: dict[str, Any] = {"address": ("127.0.0.1", server.port), "key": key, "run_id": run_id, "shape": None}
    cfg["ranks_per_pod"] = 0
    cfg.update(max_restarts=0, check=True, join_timeout=60.0)
    fleet = Fleet(workers, cfg, first_source=3)
    guard = _thread_guard(server.proc.pid, max_threads, figures)
    try:
        members = list(range(1, tasks))
        fleet.add("task", "task", [(i, f"node{i}", i) for i in members])
        fleet.call("start")
        _wait(lambda: _settled(fleet, len(members)) or None not in fleet.query("joined").values(), 90, guard)
        joined = fleet.query("joined")
        got = [t for t in joined.values() if t is not None]
        first = fleet.query("first_try")
        figures.update(connected=len(got), tries=fleet.summary()["tries"])
        figures["connected_s"] = round(max(got) - max(first.values()), 3) if len(got) == len(members) else None
        t0 = time.monotonic()
        server.ask("go 1", "went")
        fleet.call("propose")
        _wait(lambda: None not in fleet.query("stop_at").values(), 30, guard)
        have = [v for v in fleet.query("stop_at").values() if v is not None]
        figures["agreed"] = len(have)
        figures["step_ok"] = {s for s, _t in have} == {STOP_BASE + max(i % 7 for i in members)}
        figures["agreed_s"] = round(max(t for _s, t in have) - t0, 3) if len(have) == len(members) else None
        used = usage(server.proc.pid)
        figures.update(threads=used.threads if used else None, rss_mb=round(used.rss_mb, 1) if used else None)
    except (RuntimeError, TimeoutError) as exc:
        figures["aborted"] = str(exc)
    finally:
        fleet.close()
        server.close()
    return figures


def dial_back(agents: int, flood: int, dialect: str, workers: int, max_threads: int) -> dict[str, Any]:
    """The launcher's dial-back listener, ``flood`` clients without the secret holding connections open (each
    reconnects 0.1 s after it is dropped), then ``agents`` agents dialling back at once: how many joined (by the
    agents' count and the listener's), in how long from the last agent's first try, with how many tries."""
    run_id, key = f"benchdial{os.getpid()}", os.urandom(32)
    figures: dict[str, Any] = {"agents": agents, "flood": flood, "dialect": dialect}
    server = Server("dial", run_id, key, [])
    cfg: dict[str, Any] = {"address": ("127.0.0.1", server.port), "key": key, "run_id": run_id, "shape": None}
    cfg["ranks_per_pod"] = 0
    cfg.update(max_restarts=0, check=True, join_timeout=60.0)
    flooding = Fleet(1, {**cfg, "join_timeout": 1e9}, first_source=4) if flood else None
    fleet = Fleet(workers, cfg, first_source=5)
    guard = _thread_guard(server.proc.pid, max_threads, figures)
    try:
        if flooding is not None:
            flooding.add("flood", "flood", [(i, "", -1) for i in range(flood)])
            flooding.call("start")
            time.sleep(3.0)
            figures["flood_connections"] = flooding.summary()["tries"]
        fleet.add("agent", dialect, [(i, f"agent-{i}", -1) for i in range(agents)])
        fleet.call("start")
        _wait(lambda: _settled(fleet, agents), 90, guard)
        joined = [t for t in fleet.query("joined").values() if t is not None]
        summary = fleet.summary()
        figures.update(joined=len(joined), tries=summary["tries"], gave_up=dict(summary["gave_up"].most_common(3)))
        figures["listener_joined"] = int(server.ask(f"count {agents}", "count").split()[1])
        first = fleet.query("first_try")
        figures["joined_s"] = round(max(joined) - max(first.values()), 3) if len(joined) == agents else None
        if flooding is not None:
            figures["flood_connections"] = flooding.summary()["tries"]
        used = usage(server.proc.pid)
        figures.update(threads=used.threads if used else None, rss_mb=round(used.rss_mb, 1) if used else None)
    except (RuntimeError, TimeoutError) as exc:
        figures["aborted"] = str(exc)
    finally:
        fleet.close()
        if flooding is not None:
            flooding.close()
        server.close()
    return figures
