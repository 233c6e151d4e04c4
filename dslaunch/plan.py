"""The frozen launch plan: everything a runner and a node agent need, nothing else.

The CLI builds a :class:`LaunchPlan`; runners take it and never see the
command-line namespace. The plan travels to node agents as JSON.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

PLAN_VERSION = 1


@dataclass(frozen=True)
class NodePlan:
    host: str
    node_rank: int
    slots: tuple[str, ...]
    ranks: tuple[int, ...]

    @property
    def nproc(self) -> int:
        return len(self.ranks)


@dataclass(frozen=True)
class Program:
    """What each rank runs: a script, a module (``-m``) or an executable (``--no-python``)."""

    target: str
    args: tuple[str, ...] = ()
    module: bool = False
    no_python: bool = False
    python: str = "python3"
    local_rank_arg: bool = False  # append --local_rank=N, as DeepSpeed does


@dataclass(frozen=True)
class LaunchPlan:
    launcher: str
    run_id: str
    nodes: tuple[NodePlan, ...]
    master_addr: str
    master_port: int
    program: Program
    shutdown_timeout: float = 5.0
    log_dir: str | None = None
    cwd: str | None = None
    # Environment given to every rank on every node (logging spec, mesh spec, exports...).
    env: tuple[tuple[str, str], ...] = ()
    # Runner-specific settings (ssh options, srun arguments...), typed by each runner.
    runner_options: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def world_size(self) -> int:
        return sum(node.nproc for node in self.nodes)

    def node(self, node_rank: int) -> NodePlan:
        return self.nodes[node_rank]

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.runner_options).get(name, default)

    def with_port(self, port: int) -> LaunchPlan:
        return replace(self, master_port=port)

    def summary(self) -> dict[str, Any]:
        """The dry-run view: stable keys, rank order."""
        return {
            "launcher": self.launcher,
            "world_size": self.world_size,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "nodes": [
                {"host": n.host, "node_rank": n.node_rank, "slots": list(n.slots), "ranks": list(n.ranks)}
                for n in self.nodes
            ],
            "program": {
                "target": self.program.target,
                "args": list(self.program.args),
                "module": self.program.module,
                "no_python": self.program.no_python,
            },
            "shutdown_timeout": self.shutdown_timeout,
            "log_dir": self.log_dir,
        }

    def to_json(self) -> str:
        data = asdict(self)
        data["version"] = PLAN_VERSION
        return json.dumps(data, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> LaunchPlan:
        data = json.loads(text)
        version = data.pop("version", None)
        if version != PLAN_VERSION:
            raise ValueError(f"launch plan version {version!r} is not {PLAN_VERSION}: launcher and agent differ")
        nodes = tuple(
            NodePlan(n["host"], n["node_rank"], tuple(n["slots"]), tuple(n["ranks"])) for n in data.pop("nodes")
        )
        program = Program(**_program(data.pop("program")))
        env = tuple((k, v) for k, v in data.pop("env"))
        options = tuple((k, v) for k, v in data.pop("runner_options"))
        return LaunchPlan(nodes=nodes, program=program, env=env, runner_options=options, **data)


def _program(raw: dict[str, Any]) -> dict[str, Any]:
    return {**raw, "args": tuple(raw["args"])}


def assign_ranks(pool: dict[str, tuple[str, ...]]) -> tuple[NodePlan, ...]:
    """Number nodes and ranks in pool order; hosts with no slots get no node."""
    nodes: list[NodePlan] = []
    next_rank = 0
    for host, slots in pool.items():
        if not slots:
            continue
        ranks = tuple(range(next_rank, next_rank + len(slots)))
        nodes.append(NodePlan(host, len(nodes), tuple(slots), ranks))
        next_rank += len(slots)
    return tuple(nodes)
