"""The frozen launch plan: everything a runner and a node agent need, nothing else.

The CLI builds a :class:`LaunchPlan`; runners take it and never see the
command-line namespace. The plan travels to node agents as JSON.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

# 2: typed runner options (remote, slurm, launcher_args, bind_cores, manual_node) replaced the option bag.
# 3: restarts, hang_timeout, preload.
# 4: elastic (candidate hosts, MIN:MAX).
# 5: pods (one launcher per node: the coordinator's address and the join timeout).
# 6: remote.spare_check (ssh spares' health checks); job agents take plans per attempt.
# 7: no_restart_on (--no-restart-on).
# 8: stop_grace, stop_exit_code, stop_signal (a requested stop, docs/stopping.md).
# 9: restarts.repeat_window (--repeat-window).
# 10: transport (what the chosen transport does, for the layers that know none by name: cli/decide.py's table).
PLAN_VERSION = 10
# --stop-grace's default: with --shutdown-timeout's 5 s and a few seconds for the launcher and agents to end, a stop
# fits Kubernetes' terminationGracePeriodSeconds and Slurm's KillWait, both 30 s by default (docs/stopping.md).
DEFAULT_STOP_GRACE = 20.0
# --repeat-window's default: a script without progress beats fails "before the first step" only this early
# (a bad import, a missing file); a failure later may be hours into training (docs/restarts.md).
DEFAULT_REPEAT_WINDOW = 300.0
# In the plan's env (and so each rank's) as "0" when --no-collapse-output: the agents and the launcher read it.
COLLAPSE_VAR = "DSLAUNCH_COLLAPSE_OUTPUT"


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
class RemoteSettings:
    """How the ssh and pdsh runners (and mpirun's rsh agent) reach other hosts."""

    fanout: int = 32
    venv_script: str | None = None
    ssh_config: str | None = None
    ssh_port: int | None = None
    accept_new_hosts: bool = False
    connect_timeout: float = 10.0
    spare_check: float = 30.0  # seconds between health checks of a spare host waiting with its agent (ssh)


SlurmMode = Literal["srun", "node", "rank"]


@dataclass(frozen=True)
class SlurmSettings:
    """``srun``: this launcher runs srun in an allocation; ``node``/``rank``: this srun task is a node agent/rank."""

    mode: SlurmMode = "srun"
    exclude: tuple[str, ...] = ()  # allocation nodes left out (srun --exclude)
    signals_ranks: bool = False  # Slurm itself signals every rank (srun --signal / scancel -s): relay nothing


@dataclass(frozen=True)
class Restarts:
    """``--max-restarts``/``--restart-delay``/``--repeat-window``, and which attempt this plan is (0 the first)."""

    max_restarts: int = 0
    delay: float = 1.0
    count: int = 0
    # --repeat-window: in a job without progress beats, only a failure this early in its attempt counts as before the
    # first step, for the repeat rule (job/restart_policy.py); 0: no repeat ends a job
    repeat_window: float = DEFAULT_REPEAT_WINDOW


@dataclass(frozen=True)
class Candidate:
    """A host the job may run on, with its slots."""

    host: str
    slots: tuple[str, ...]


@dataclass(frozen=True)
class Elastic:
    """The hosts an attempt may use (docs/elastic.md): ``candidates`` in hostfile order, the active ones first.

    Empty ``candidates``: every attempt runs on ``plan.nodes`` as they are. Otherwise each attempt runs on the
    first ``nnodes_max`` healthy candidates, and not at all below ``nnodes_min`` (``dslaunch.job.elastic``).
    """

    candidates: tuple[Candidate, ...] = ()
    nnodes_min: int = 0
    nnodes_max: int = 0
    fixed_addr: bool = False  # --master-addr was given: it stays whichever hosts are used

    @property
    def spares(self) -> tuple[str, ...]:
        return tuple(c.host for c in self.candidates[self.nnodes_max :])


@dataclass(frozen=True)
class PodSettings:
    """One launcher per node (``--nnodes N --node-rank R``, a Kubernetes pod each): where node rank 0's launcher
    takes the other pods' connections (``dslaunch/pods/``, docs/kubernetes.md), and how long it waits for them."""

    coordinator: str = ""  # --rdzv-endpoint's host, else --master-addr
    port: int = 0  # --rdzv-endpoint's port, else --master-port + 1
    join_timeout: float = 600.0  # --rdzv-conf join_timeout=SECONDS, as torchrun's
    # elastic (--nnodes MIN:MAX, or c10d without --node-rank): the coordinator gives each pod its node rank
    nnodes_min: int = 0
    nnodes_max: int = 0  # 0: a fixed job, each pod brings its --node-rank
    last_call: float = 2.0  # --rdzv-conf last_call_timeout: MIN pods wait this long for more, up to MAX

    @property
    def elastic(self) -> bool:
        return self.nnodes_max > 0


@dataclass(frozen=True)
class TransportFacts:
    """What the chosen transport does that the layers below the CLI act on: the agent, the job core, the output and
    the observer know no transport by name (``cli/decide.py`` decides these, one row per launcher)."""

    heartbeats: bool = False  # the launcher sends heartbeats on each agent's control channel (wire.silence_bound)
    teardown_by_signal: bool = False  # the launcher stops an agent with wire.TEARDOWN_SIGNAL: no channel to one agent
    stacks_on_demand: bool = True  # SIGQUIT reaches the agents, so a hang asks every rank for its stack
    supervises_own_node: bool = False  # each node's launcher supervises its node alone: a stop counts its ranks
    console_per_node: bool = False  # each node's launcher and agent have a console of their own (a pod each)
    node0_holds_job_figures: bool = False  # one launcher per node: node 0's holds the job-wide figures


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
    # Runner settings, each read only by the runners it names.
    remote: RemoteSettings = RemoteSettings()
    slurm: SlurmSettings = SlurmSettings()
    launcher_args: tuple[str, ...] = ()  # --launcher-args: mpirun/mpiexec/srun
    bind_cores: tuple[int, ...] | None = None  # --bind-cores-to-rank: None off; () the node's usable cores
    manual_node: int | None = None  # --node-rank N: the node the "node" launcher starts here
    restarts: Restarts = Restarts()
    hang_timeout: float | None = None  # --hang-timeout: no rank made progress this long is a hang (None: off)
    preload: tuple[str, ...] = ()  # --preload: modules each node's zygote imports before forking ranks
    elastic: Elastic = Elastic()  # --nnodes MIN:MAX and spare hosts (empty: a fixed set of nodes)
    pods: PodSettings = PodSettings()  # the "node" launcher's control channel
    no_restart_on: tuple[int, ...] = ()  # --no-restart-on: a rank's exit codes that end the job, never restarted
    stop_grace: float = DEFAULT_STOP_GRACE  # a requested stop: seconds from the request to SIGTERM of the groups
    stop_exit_code: int | None = None  # a requested stop's exit code (None: 128+N of the signal that asked)
    stop_signal: str | None = None  # --stop-on-signal: a signal name (USR1) that requests a stop as SIGTERM does
    transport: TransportFacts = TransportFacts()  # what plan.launcher's transport does (cli/decide.TRANSPORTS)

    @property
    def collapse_output(self) -> bool:
        """Whether identical console lines of many ranks print once (--collapse-output, docs/logging.md)."""
        return (COLLAPSE_VAR, "0") not in self.env

    @property
    def stop_signum(self) -> int | None:
        """--stop-on-signal's signal number (None: only SIGINT/SIGTERM/SIGHUP request a stop)."""
        return None if self.stop_signal is None else int(signal.Signals[self.stop_signal])

    @property
    def world_size(self) -> int:
        return sum(node.nproc for node in self.nodes)

    def node(self, node_rank: int) -> NodePlan:
        return self.nodes[node_rank]

    def with_port(self, port: int) -> LaunchPlan:
        return replace(self, master_port=port)

    def attempt(self, count: int) -> LaunchPlan:
        """The same plan as restart number ``count`` (0: the first attempt)."""
        return replace(self, restarts=replace(self.restarts, count=count))

    def summary(self) -> dict[str, Any]:
        """The dry-run view: stable keys, rank order; an elastic plan adds its node range and spares."""
        elastic = {"nnodes": [self.elastic.nnodes_min, self.elastic.nnodes_max], "spares": list(self.elastic.spares)}
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
            "max_restarts": self.restarts.max_restarts,
            "restart_delay": self.restarts.delay,
            **(
                {"repeat_window": self.restarts.repeat_window}
                if self.restarts.repeat_window != DEFAULT_REPEAT_WINDOW
                else {}
            ),
            "hang_timeout": self.hang_timeout,
            **({"no_restart_on": list(self.no_restart_on)} if self.no_restart_on else {}),
            "stop_grace": self.stop_grace,
            **(elastic if self.elastic.candidates else {}),
            **({"coordinator": f"{self.pods.coordinator}:{self.pods.port}"} if self.pods.port else {}),
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
        slurm = data.pop("slurm")
        bind = data.pop("bind_cores")
        elastic = data.pop("elastic")
        return LaunchPlan(
            nodes=nodes,
            program=program,
            env=env,
            remote=RemoteSettings(**data.pop("remote")),
            slurm=SlurmSettings(**{**slurm, "exclude": tuple(slurm["exclude"])}),
            launcher_args=tuple(data.pop("launcher_args")),
            bind_cores=None if bind is None else tuple(bind),
            restarts=Restarts(**data.pop("restarts")),
            preload=tuple(data.pop("preload")),
            elastic=Elastic(
                candidates=tuple(Candidate(c["host"], tuple(c["slots"])) for c in elastic["candidates"]),
                nnodes_min=elastic["nnodes_min"],
                nnodes_max=elastic["nnodes_max"],
                fixed_addr=elastic["fixed_addr"],
            ),
            pods=PodSettings(**data.pop("pods")),
            no_restart_on=tuple(data.pop("no_restart_on")),
            transport=TransportFacts(**data.pop("transport")),
            **data,
        )


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
