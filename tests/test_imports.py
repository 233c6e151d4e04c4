"""Import hygiene: the CLI and node agent start without torch or paramiko (click's import-allowlist idea), and the
layers of dslaunch/ hold (a static check of every import; docs/architecture.md, "Layers")."""

from __future__ import annotations

import ast
import collections
import functools
import itertools
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

HEAVY = ("torch", "paramiko", "numpy")


def imported_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    import json

    return set(json.loads(out.splitlines()[-1]))


@pytest.mark.launch
@pytest.mark.parametrize(
    "code",
    [
        "import dslaunch",
        "import dslaunch.cli",
        "from dslaunch.cli.command import build_command; build_command()",
        "import dslaunch.agent.__main__, dslaunch.agent.run_node, dslaunch.agent.node_loop",
        "import dslaunch.bootstrap.__main__",
        "from dslaunch.runners import get_runner; get_runner('local')",
    ],
)
def test_no_heavy_imports(code: str) -> None:
    heavy = {m for m in imported_after(code) if m.split(".")[0] in HEAVY}
    assert not heavy, f"{code!r} imports {sorted(heavy)}"


@pytest.mark.launch
def test_help_runs_without_heavy_imports() -> None:
    code = "import sys\nfrom dslaunch.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    heavy = {m for m in imported_after(code) if m.split(".")[0] in HEAVY}
    assert not heavy


PROGRESS_API = ("ssl", "urllib.request", "http.client", "dslaunch.observe.trainer_status")


@pytest.mark.launch
@pytest.mark.parametrize("status_url", ["", "https://127.0.0.1:1/status"])
def test_kubeflow_trainers_progress_api_is_imported_only_where_its_variable_is_set(
    tmp_path: Path, status_url: str
) -> None:
    """A whole launch (one rank) imports ssl and urllib only for KUBEFLOW_TRAINER_STATUS_URL (observe.session
    imports observe.trainer_status lazily; the endpoint is unusable here, so nothing is posted)."""
    program = tmp_path / "noop.py"
    program.write_text("pass\n")
    var = "KUBEFLOW_TRAINER_STATUS_URL"
    code = "\n".join(
        [
            "import os",
            f"os.environ[{var!r}] = {status_url!r}" if status_url else f"os.environ.pop({var!r}, None)",
            "from dslaunch.cli import main",
            "try:",
            f"    main(['--master-port', '0', '--nproc-per-node', '1', {str(program)!r}])",
            "except SystemExit as exc:",
            "    assert exc.code == 0, exc.code",
        ]
    )
    modules = imported_after(code)
    assert "dslaunch.observe.session" in modules  # the observer ran
    loaded = {m for m in modules if m in PROGRESS_API}
    assert loaded == (set(PROGRESS_API) if status_url else set()), sorted(loaded)


# ---- layers: a static check over every import in dslaunch/ (docs/architecture.md, "Layers") ----------------------
#
# Every module is parsed with ast; every import counts, lazy function-level and TYPE_CHECKING ones included
# (a lazy import still makes the importing module depend on the imported one). `from X import y` is the module
# X.y when that is a module, else X; relative imports are resolved against the importing module.

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dslaunch"


@dataclass(frozen=True)
class Import:
    src: str  # importing module, e.g. "dslaunch.agent.node_loop"
    dst: str  # a dslaunch module ("dslaunch.cli.plan_text") or a third-party/stdlib top-level name ("click")
    where: str  # "dslaunch/agent/node_loop.py:39"

    def __str__(self) -> str:
        return f"{self.where}: {self.src} imports {self.dst}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    known = modules()
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]


@functools.cache
def imports() -> tuple[Import, ...]:
    found = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, path, node):
                    dst = target if target.split(".")[0] == "dslaunch" else target.split(".")[0]
                    if dst != module:
                        found.append(Import(module, dst, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return tuple(found)


def imports_of(module: str) -> list[Import]:
    return [i for i in imports() if i.src == module]


def package_of(module: str) -> str:
    """The package graph's node: the first level under dslaunch (cli, runners, agent, ...; plan, wire, ... for
    top-level modules). ``dslaunch`` itself is the public facade; a ``__main__`` module is an entry point that
    nothing imports, a node of its own."""
    parts = module.split(".")
    if len(parts) == 1 or parts[0] != "dslaunch":
        return module
    return ".".join(parts[1:]) if parts[-1] == "__main__" else parts[1]


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def reaching(start: str, forbidden: tuple[str, ...], through: tuple[str, ...] = ("dslaunch",)) -> list[Import] | None:
    """The shortest import chain from ``start`` to a module under ``forbidden``, following dslaunch modules."""
    seen = {start}
    queue: collections.deque[tuple[str, list[Import]]] = collections.deque([(start, [])])
    while queue:
        module, chain = queue.popleft()
        for edge in imports_of(module):
            if _under(edge.dst, forbidden):
                return [*chain, edge]
            if edge.dst not in seen and _under(edge.dst, through):
                seen.add(edge.dst)
                queue.append((edge.dst, [*chain, edge]))
    return None


def _explain(chains: list[list[Import]]) -> str:
    return "\n".join("\n  then ".join(str(edge) for edge in chain) for chain in chains)


def test_the_scan_sees_lazy_relative_and_from_imports() -> None:
    edges = {(i.src, i.dst) for i in imports()}
    assert ("dslaunch.job.loop", "dslaunch.wire") in edges  # from dslaunch import wire: a module
    assert ("dslaunch.bootstrap.engine", "torch") in edges  # lazy, inside a function
    assert ("dslaunch.cli.command", "dslaunch") in edges  # from dslaunch import __version__: the facade
    assert len(modules()) > 60


# The node agent and the rank bootstrap run on every node, often in a bare environment: never the CLI or click.
NODE_SIDE = ("dslaunch.agent", "dslaunch.bootstrap")
CLI = ("dslaunch.cli", "click")


@pytest.mark.parametrize("module", [m for m in sorted(modules()) if _under(m, NODE_SIDE)])
def test_agent_and_bootstrap_never_import_the_cli(module: str) -> None:
    chain = reaching(module, CLI)
    if chain:
        pytest.fail(f"{module} reaches the CLI:\n{_explain([chain])}", pytrace=False)


# Leaf modules: what they may import from dslaunch (besides the stdlib, dslaunch.errors and dslaunch.limits; nothing
# third-party).
LEAVES: dict[str, tuple[str, ...]] = {
    "dslaunch.errors": (),  # the one user-error base every parser raises
    "dslaunch.limits": (),  # caps and ASCII-only numbers for every parser
    "dslaunch.plan": (),  # the frozen plan every layer passes around
    # the launcher <-> agent wire: the package re-exports its modules' names
    "dslaunch.wire": tuple(f"dslaunch.wire.{m}" for m in ("control", "decoder", "events", "plan_codec", "stream")),
    "dslaunch.wire.plan_codec": ("dslaunch.plan",),  # it encodes the plan
    "dslaunch.wire.events": (),
    "dslaunch.wire.decoder": ("dslaunch.wire.events", "dslaunch.wire_check", "orjson"),  # orjson: on first decode
    "dslaunch.wire.stream": ("dslaunch.wire.events",),
    "dslaunch.wire.control": ("dslaunch.plan", "dslaunch.wire.plan_codec", "dslaunch.wire_check"),
    "dslaunch.wire_check": (),  # every wire message's fields checked
    "dslaunch.inputs.hostfile": (),
    "dslaunch.agent.mpi_env": (),
    "dslaunch.oslib.prctl": (),
    "dslaunch.oslib.binding": (),
    "dslaunch.inputs.config": ("dslaunch.inputs.userfiles",),  # the capped read of a user's file
    "dslaunch.oslib.procs": (),  # a job's processes on this host, from /proc: the agent's sweep and the reaper
    "dslaunch.masking": (),  # secret masking: the CLI's dry run and the agent's debug log
    "dslaunch.oslib.gpus": (),  # visible GPU ids without torch: the CLI and preflight
    "dslaunch.inputs.userfiles": (),  # capped reads of the files a user names
    "dslaunch.oslib.owner_only": (),  # owner-only folders and files for the logs
    "dslaunch.oslib.port_holders": (),  # who holds a local TCP port, for "port in use" messages
    "dslaunch.nesting": (),  # a rank's own dslaunch: forget what its parent job set
    "dslaunch.failure_bounds": (),  # head-and-tail caps on a failure's text, for the bootstrap and the agent
    "dslaunch.mesh": (),  # mesh spec and layout (pure); bootstrap.mesh_build adds torch
    "dslaunch.logs.spec": (),
    # Slurm's pure side: environment, hostlists, task layout, srun lines (runners put it to work)
    "dslaunch.slurmlib.address": (),
    "dslaunch.slurmlib.hostlist": (),
    "dslaunch.slurmlib.layout": ("dslaunch.plan", "dslaunch.slurmlib.hostlist"),
    "dslaunch.slurmlib.srun": ("dslaunch.plan", "dslaunch.wire"),
    "dslaunch.slurmlib.task_plan": ("dslaunch.plan", "dslaunch.slurmlib.layout"),
    "dslaunch.slurmlib.lost_nodes": (),
    "dslaunch.slurmlib.step_code": ("dslaunch.slurmlib.lost_nodes",),
    # the handshake of the job's control channels, for the pods, the Slurm tasks and the pdsh and MPI dial-back
    "dslaunch.channel.handshake": (),
    "dslaunch.channel.line_reader": (),
    # the one place that decides whether another attempt may run
    "dslaunch.job.restart_policy": ("dslaunch.job.result", "dslaunch.plan"),
}
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@pytest.mark.parametrize("module", sorted(LEAVES))
def test_leaf_modules_import_only_their_allow_list(module: str) -> None:
    assert module in modules(), f"{module} is gone: update LEAVES"
    allowed_here = {*LEAVES[module], *STDLIB, "dslaunch.errors", "dslaunch.limits"}
    bad = [i for i in imports_of(module) if i.dst not in allowed_here]
    allowed = ", ".join(LEAVES[module]) or "nothing"
    if bad:
        pytest.fail(
            f"{module} may import the stdlib and {allowed}; it imports:\n" + "\n".join(map(str, bad)), pytrace=False
        )


# Code that runs inside the user's ranks never pulls in launcher code (nor click or paramiko).
RANK_SIDE = (
    "dslaunch.bootstrap",  # with its mesh_build, comm and timers
    "dslaunch.mesh",
    "dslaunch.compat",
)
LAUNCHER_SIDE = (
    "dslaunch.cli",
    "dslaunch.runners",
    "dslaunch.agent",
    "dslaunch.slurmlib.srun",
    "click",
    "paramiko",
)


@pytest.mark.parametrize("module", [m for m in sorted(modules()) if _under(m, RANK_SIDE)])
def test_rank_side_never_imports_the_launcher_side(module: str) -> None:
    chain = reaching(module, LAUNCHER_SIDE)
    if chain:
        pytest.fail(f"rank-side {module} reaches launcher code:\n{_explain([chain])}", pytrace=False)


def _cycle(graph: dict[str, dict[str, Import]]) -> list[Import] | None:
    """One cycle of ``graph`` (node -> {node: the first import making that edge}), as its edges."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[Import] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, {})):
            if state.get(nxt) == 1:
                loop = [*path[path.index(nxt) :], nxt]
                return [graph[a][b] for a, b in itertools.pairwise(loop)]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _graph(node_of: Callable[[str], str]) -> dict[str, dict[str, Import]]:
    graph: dict[str, dict[str, Import]] = collections.defaultdict(dict)
    for i in imports():
        a, b = node_of(i.src), node_of(i.dst) if i.dst in modules() else None
        if b is not None and a != b:
            graph[a].setdefault(b, i)
    return graph


def test_no_cycles_between_packages() -> None:
    cycle = _cycle(_graph(package_of))
    if cycle:
        path = " -> ".join([package_of(e.src) for e in cycle] + [package_of(cycle[0].src)])
        pytest.fail(f"package cycle {path}:\n  " + "\n  ".join(map(str, cycle)), pytrace=False)


# ---- one rule per package: which other packages (or top-level modules) it may import -----------------------------
# The package graph's node is a first-level package or a top-level module (package_of). Every node must be listed
# here, so a new package states its place; an edge missing from its row fails the test. The order below is the
# order of the layers, from the shared vocabulary up to the CLI.
BASE = ("errors", "limits")  # the user-error base and the caps every parser checks: anyone may import them
PACKAGE_RULES: dict[str, tuple[str, ...]] = {
    # shared vocabulary and cross-process contracts
    "errors": (),
    "limits": (),
    "plan": (),
    "wire_check": (),  # the type and range of every field of every message on the wire
    "wire": ("limits", "plan", "wire_check"),  # what crosses the launcher <-> agent boundary: it encodes the plan
    "masking": (),
    "nesting": (),
    "failure_bounds": (),
    "mesh": BASE,
    # leaves grouped by kind
    "inputs": BASE,  # what users hand us (pure)
    "oslib": BASE,  # Linux helpers
    "slurmlib": (*BASE, "plan", "wire"),  # Slurm's pure side
    "output": (*BASE, "plan", "wire"),  # rank output, on both sides of the wire
    # a job's control channels, for every transport: the pods', the Slurm tasks' stop channel, the pdsh and MPI
    # agents' dial-back (the stdlib, and DslaunchError for a bad secret)
    "channel": BASE,
    "logs": (*BASE, "mesh", "oslib"),
    "report": (*BASE, "inputs", "logs"),
    # seeing a running job: each rank's timer windows (rank side), their relay (agent side), the breakdown,
    # stragglers and metrics (launcher side); prometheus-client only in observe.metrics, imported on demand
    "observe": (*BASE, "logs", "output", "plan", "wire"),
    # the rank side: never the launcher's code
    "bootstrap": (*BASE, "failure_bounds", "inputs", "logs", "mesh", "observe", "oslib", "slurmlib"),
    "compat": (*BASE, "bootstrap", "mesh"),
    "dslaunch": ("bootstrap", "logs"),  # the public facade: engine(), get_logger(), heartbeat()
    # the node agent: runs ranks (its zygote runs the bootstrap), never the launcher's code; an agent pdsh or mpirun
    # started dials back with the handshake of channel/ (agent/dialback_client.py)
    "agent": (
        *BASE,
        *("channel", "bootstrap", "failure_bounds", "logs", "masking", "nesting", "observe", "oslib", "output", "plan"),
        "wire",
    ),
    # the launcher side
    "job": (*BASE, "failure_bounds", "logs", "mesh", "observe", "output", "plan", "wire"),  # the job core: no transport
    # the control channel between one job's pods, and each pod's side of an attempt (no agent code)
    # (the job's observer passes through a pod's side of an attempt to job.loop.supervise)
    "pods": (*BASE, "channel", "job", "logs", "mesh", "observe", "output", "plan", "wire", "wire_check"),
    "runners": (
        *BASE,
        *("agent", "channel", "dslaunch", "job", "logs", "masking", "mesh", "observe", "oslib", "output", "plan"),
        "pods",
        *("slurmlib", "wire", "wire_check"),  # wire_check: the Slurm tasks' stop channel checks its messages
    ),
    "cli": (
        *BASE,
        *("dslaunch", "inputs", "job", "logs", "masking", "mesh", "nesting", "observe", "oslib", "plan", "report"),
        *("runners", "slurmlib", "wire"),
    ),
}


def test_every_package_has_a_rule() -> None:
    nodes = {package_of(m) for m in modules() if not m.endswith("__main__")}
    assert sorted(nodes - set(PACKAGE_RULES)) == [], "state each new package's imports in PACKAGE_RULES"
    assert sorted(set(PACKAGE_RULES) - nodes) == [], "PACKAGE_RULES names a package that is gone"


@pytest.mark.parametrize("package", sorted(PACKAGE_RULES))
def test_each_package_imports_only_what_its_rule_allows(package: str) -> None:
    allowed = set(PACKAGE_RULES[package])
    bad = [
        str(i)
        for i in imports()
        if package_of(i.src) == package and i.dst in modules() and package_of(i.dst) not in {package, *allowed}
    ]
    if bad:
        pytest.fail(f"{package} may import {', '.join(sorted(allowed)) or 'nothing'}; it imports:\n" + "\n".join(bad))


def test_the_slurm_runner_knows_no_pods() -> None:
    """Slurm's stop channel is the pods' kind of channel, from channel/, not from pods/ (issue 54)."""
    bad = [
        str(i) for i in imports() if _under(i.src, ("dslaunch.runners.slurm",)) and _under(i.dst, ("dslaunch.pods",))
    ]
    assert not bad, "runners/slurm imports pods/: take it from channel/ (or wire_check):\n" + "\n".join(bad)


def test_the_job_core_and_output_know_no_transport() -> None:
    transports = ("dslaunch.runners", "dslaunch.slurmlib", "dslaunch.agent", "paramiko")
    for start in [m for m in modules() if _under(m, ("dslaunch.job", "dslaunch.output"))]:
        chain = reaching(start, transports)
        assert chain is None, f"{start} reaches a transport:\n{_explain([chain])}"


# Module cycles inside a package: none is known or kept (the engine and teardown both end the process groups
# through bootstrap/shutdown.py, which imports neither). A cycle that must stay is named here, with why.
KNOWN_MODULE_CYCLES: tuple[set[str], ...] = ()


def test_no_cycles_between_modules() -> None:
    graph = _graph(lambda m: m)
    for known in KNOWN_MODULE_CYCLES:
        for a in known:
            for b in known:
                graph[a].pop(b, None)
    cycle = _cycle(graph)
    if cycle:
        pytest.fail("module cycle:\n  " + "\n  ".join(map(str, cycle)), pytrace=False)


# ---- the runners: one transport a module or folder, and none imports another's ------------------------------------
# What several runners share has a home of its own: runners/remote/ (ssh and pdsh), runners/forked.py (the agents
# forked on this machine: local, node, in-step Slurm). runners/__init__ (the registry) and runners/preflight* (the
# --preflight tool, over ssh or pdsh) sit above the transports.
RUNNER_UNITS = tuple(f"dslaunch.runners.{name}" for name in ("local", "mpi", "node", "ssh", "pdsh", "slurm"))
RUNNERS_SHARED = ("dslaunch.runners.remote", "dslaunch.runners.forked")


def _unit(module: str, units: tuple[str, ...]) -> str | None:
    return next((u for u in units if _under(module, (u,))), None)


def test_the_runner_units_are_every_transport() -> None:
    runner_modules = [m for m in modules() if m.startswith("dslaunch.runners.")]
    homeless = [m for m in runner_modules if _unit(m, (*RUNNER_UNITS, *RUNNERS_SHARED)) is None]
    assert sorted(homeless) == ["dslaunch.runners.preflight", "dslaunch.runners.preflight_probe"], homeless


def test_no_module_of_one_runner_imports_another_runners() -> None:
    bad = [
        str(i)
        for i in imports()
        if (src := _unit(i.src, RUNNER_UNITS)) is not None
        and (dst := _unit(i.dst, RUNNER_UNITS)) is not None
        and src != dst
    ]
    assert not bad, "a runner imports another runner's module; share it from runners/remote or runners/forked:\n" + (
        "\n".join(bad)
    )


def test_what_runners_share_imports_no_runner() -> None:
    """Nor does anything else under runners/ (the registry, --preflight): each runner runs a command on its nodes
    its own way (``Runner.run_on_nodes``)."""
    shared = [m for m in modules() if m.startswith("dslaunch.runners") and _unit(m, RUNNER_UNITS) is None]
    bad = [str(i) for i in imports() if i.src in shared and _unit(i.dst, RUNNER_UNITS)]
    assert not bad, "shared runner code reaches a runner:\n" + "\n".join(bad)


# ---- the transport by name: only the CLI (which decides plan.transport) and the runners (each one transport) -----
KNOWS_TRANSPORTS = ("dslaunch.cli", "dslaunch.runners")


def _launcher_branches(source: str) -> list[int]:
    """The lines of ``source`` that compare something's ``.launcher`` (``plan.launcher == "pdsh"``, ``in (...)``) or
    match on it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Match):
            operands = [node.subject]
        else:
            continue
        if any(isinstance(o, ast.Attribute) and o.attr == "launcher" for o in operands):
            found.append(node.lineno)
    return found


def test_only_the_cli_and_the_runners_branch_on_the_launchers_name() -> None:
    """Below the CLI a transport's behaviour is a fact of the plan (``plan.transport``, cli/decide.TRANSPORTS)."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}"
        for module, path in modules().items()
        if not _under(module, KNOWS_TRANSPORTS)
        for line in _launcher_branches(path.read_text())
    ]
    assert not bad, "compares plan.launcher outside cli/ and runners/: use a field of plan.transport\n" + "\n".join(bad)


def test_the_launcher_scan_sees_comparisons_and_matches() -> None:
    source = (
        "a = plan.launcher == 'pdsh'\nb = self.plan.launcher in NO_STACKS\nc = 'ssh' != p.launcher\n"
        "match plan.launcher:\n    case 'x':\n        pass\nd = plan.launcher\ne = launcher == 'ssh'\n"
    )
    assert sorted(_launcher_branches(source)) == [1, 2, 3, 4]


def test_each_package_rule_points_down_the_layer_order() -> None:
    """PACKAGE_RULES lists the packages in layer order (docs/architecture.md, "Layers"): a package may import only
    packages listed before it."""
    order = list(PACKAGE_RULES)
    up = [(p, d) for p, allowed in PACKAGE_RULES.items() for d in allowed if order.index(d) >= order.index(p)]
    assert not up, f"these rules point up the layer order: {up}"


# ---- a module goes by its own name: grep finds every use -------------------------------------------------------------
# (the log spec's levels and channels read as a vocabulary, S.INFO, in the logging modules, whose own variables are
# called spec)
MODULE_ALIASES = {("dslaunch.logs.spec", "S")}


def _from_only(node: ast.ImportFrom) -> ast.ImportFrom:
    """``from X import`` a name that is no module: whose target is X itself."""
    return ast.ImportFrom(module=node.module, names=[ast.alias(name="-")], level=node.level)


def _module_aliases(allowed: set[tuple[str, str]]) -> list[str]:
    known = modules()
    found = []
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            base = "" if isinstance(node, ast.Import) else _targets(module, path, _from_only(node))[0]
            for alias, target in zip(node.names, _targets(module, path, node)):
                name = alias.name.rpartition(".")[2]
                if alias.asname and alias.asname != name and target in known and target != base:
                    if (target, alias.asname) not in allowed:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target} as {alias.asname}")
    return found


def test_no_module_is_imported_under_another_name() -> None:
    found = _module_aliases(MODULE_ALIASES)
    assert not found, "import it by its name (or the names you use from it):\n" + "\n".join(found)
    kept = _module_aliases(set())
    assert kept and all(" dslaunch.logs.spec as S" in line for line in kept), kept  # the scan sees them
