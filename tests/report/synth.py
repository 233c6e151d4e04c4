"""Synthetic phase records, as the agent and the ranks write them (dslaunch/logs/phases.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from dslaunch.logs.phases import PHASES

T0 = 1_800_000_000.0


def record(
    phase: str, t: float, rank: int, host: str, *, run_id: str = "run1", attempt: int = 0, **extra: object
) -> str:
    data = {
        "ts": "2027-01-15T08:00:00.000000Z",
        "level": "info",
        "logger": "agent" if phase in ("spawned", "exit") else "bootstrap",
        "event": "phase",
        "rank": rank,
        "host": host,
        "pid": 1000 + rank,
        "run_id": run_id,
        "phase": phase,
        "t": t,
        "attempt": attempt,
        **extra,
    }
    return json.dumps(data)


def job(
    ranks: int, *, per_node: int = 8, seed: int = 0, run_id: str = "run1", attempt: int = 0
) -> dict[str, list[str]]:
    """File name -> lines for a job of ``ranks`` ranks, ``per_node`` per host; times jittered, every phase present."""
    rnd = random.Random(seed)
    files: dict[str, list[str]] = {}
    gaps = {
        "bootstrap": 0.15,
        "torch_imported": 4.0,
        "pg_ready": 0.6,
        "mesh_ready": 0.1,
        "first_step": 0.3,
        "exit": 2.0,
    }
    for rank in range(ranks):
        node, host = rank // per_node, f"node{rank // per_node:03d}"
        t = T0 + rnd.uniform(0, 0.05)
        agent = files.setdefault(f"agent{node}.jsonl", [])
        mine = files.setdefault(f"rank{rank}.jsonl", [])
        agent.append(record("spawned", t, rank, host, run_id=run_id, attempt=attempt))
        for phase in PHASES[1:]:
            t += gaps[phase] * rnd.uniform(0.8, 1.3)
            if phase == "exit":
                agent.append(record("exit", t, rank, host, run_id=run_id, attempt=attempt, code=0))
            else:
                mine.append(record(phase, t, rank, host, run_id=run_id, attempt=attempt))
    return files


def write(log_dir: Path, files: dict[str, list[str]]) -> Path:
    log_dir.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        with open(log_dir / name, "a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
    return log_dir
