"""One decision point: the launcher, address and port are chosen in ``dslaunch.cli.decide`` and nowhere else,
and every path through the CLI (run, --dry-run, --preflight) acts on that one plan."""

from __future__ import annotations

import ast
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from dslaunch.cli.decide import TRANSPORTS, pick_address, pick_launcher
from dslaunch.errors import DslaunchError
from dslaunch.plan import LaunchPlan, NodePlan, TransportFacts
from dslaunch.runners import RUNNERS
from tests.helpers import run_cli
from tests.plans import dry_run_json, nodes_of, plan_of

ROOT = Path(__file__).resolve().parents[2]
REMOTE = "pdsh" if shutil.which("pdsh") else "ssh"


def _nodes(*hosts: str) -> tuple[NodePlan, ...]:
    return nodes_of(hosts)


@pytest.mark.parametrize(
    ("asked", "hosts", "slurm", "node_rank", "force_multi", "expected"),
    [
        ("auto", ("localhost",), False, None, False, "local"),
        ("auto", ("127.0.0.1",), False, None, False, "local"),
        ("auto", ("localhost",), False, None, True, REMOTE),
        ("auto", ("w1",), False, None, False, REMOTE),
        ("auto", ("localhost", "127.0.0.1"), False, None, False, REMOTE),  # two agents: two hosts
        ("ssh", ("w1", "w2"), False, None, False, "ssh"),
        ("local", ("localhost",), False, None, True, "local"),  # --force-multi only steers auto
        ("openmpi", ("w1",), False, None, True, "openmpi"),
        ("ssh", ("w1", "w2"), False, 1, False, "node"),  # --node-rank: this node only, no ssh
        ("auto", ("n1", "n2"), True, None, False, "slurm"),
    ],
)
def test_pick_launcher(
    asked: str, hosts: tuple[str, ...], slurm: bool, node_rank: int | None, force_multi: bool, expected: str
) -> None:
    got = pick_launcher(asked, _nodes(*hosts), slurm=slurm, node_rank=node_rank, force_multi=force_multi)
    assert got == expected


def test_auto_with_remote_hosts_and_no_remote_launcher_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dslaunch.cli.decide.REMOTE_LAUNCHERS", ("pdsh",))
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    with pytest.raises(DslaunchError, match=r"remote hosts \(w1\).*needs a remote launcher \(pdsh\)"):
        pick_launcher("auto", _nodes("w1"), slurm=False, node_rank=None, force_multi=False)


@pytest.mark.parametrize(
    ("given", "launcher", "hosts", "remote", "expected"),
    [
        ("10.0.0.9", "ssh", ("w1",), True, "10.0.0.9"),
        (None, "local", ("localhost",), False, "127.0.0.1"),
        (None, "local", ("w1", "w2"), True, "127.0.0.1"),  # a local run: every agent is on this machine
        (None, "node", ("alice@w1", "w2"), True, "w1"),  # manual mode: no ssh config to ask
        (None, "node", ("localhost",), False, "127.0.0.1"),
    ],
)
def test_pick_address(given: str | None, launcher: str, hosts: tuple[str, ...], remote: bool, expected: str) -> None:
    got = pick_address(given, launcher, _nodes(*hosts), remote=remote, ssh_config=None, environ={})
    assert got == expected


@pytest.mark.launch
@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--force-multi"],
        ["--launcher", "ssh"],
        ["-H", "{hostfile}"],
        ["--node-rank", "0", "--master-port", "29511"],
    ],
    ids=["local", "force-multi", "ssh", "remote-hostfile", "manual-node"],
)
def test_preflight_and_dry_run_agree_on_the_launcher(options: list[str], tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("127.0.0.2 slots=1\n")  # not a local name: a remote host nothing listens on
    args = [arg.format(hostfile=hostfile) for arg in options] + ["--ssh-connect-timeout", "2"]
    planned = dry_run_json([*args, "train.py"])["launcher"]
    checked = run_cli([*args, "--preflight"], timeout=60)
    first = checked.stdout.splitlines()[0] if checked.stdout else checked.stderr
    assert first.startswith(f"dslaunch preflight via {planned}:"), (planned, checked.stdout, checked.stderr)


def _calls(name: str) -> list[str]:
    """Where in dslaunch/ a function or method called ``name`` is called."""
    found = []
    for path in sorted((ROOT / "dslaunch").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    found.append(str(path.relative_to(ROOT)))
    return found


def test_the_plan_is_built_in_one_place() -> None:
    # decide builds the plan; plan.py decodes one that arrived over the wire.
    assert sorted(set(_calls("LaunchPlan"))) == ["dslaunch/cli/decide.py", "dslaunch/plan.py"]
    assert _calls("pick_launcher") == ["dslaunch/cli/decide.py"]
    assert _calls("pick_address") == ["dslaunch/cli/decide.py"]


def test_port_zero_is_resolved_only_where_the_port_must_be_free() -> None:
    """--master-port 0 is kept as 0 in the plan and resolved at launch, once per runner kind: on this machine
    (local, MPI), on node 0 (ssh, pdsh), or from the step ids (Slurm); see docs/architecture.md."""
    assert sorted(_calls("with_port")) == [
        "dslaunch/runners/local.py",
        "dslaunch/runners/mpi.py",
        "dslaunch/runners/remote/base.py",
        "dslaunch/slurmlib/task_plan.py",
    ]


# ---- what each transport does, as the layers below the CLI see it (plan.transport) --------------------------------
FACT_COLUMNS = (
    "heartbeats",
    "teardown_by_signal",
    "stacks_on_demand",
    "supervises_own_node",
    "console_per_node",
    "node0_holds_job_figures",
)
FACTS_TABLE = {
    # launcher:  heartbeats, teardown by signal, stacks, own node only, console per node, node 0's figures
    "local": (False, False, True, False, False, False),
    "ssh": (True, False, True, False, False, False),
    "pdsh": (False, True, True, False, False, False),
    "slurm": (False, False, True, True, False, False),
    "openmpi": (False, False, False, False, False, False),
    "mpich": (False, False, False, False, False, False),
    "node": (False, False, True, False, True, True),
}


@pytest.mark.parametrize("launcher", sorted(FACTS_TABLE))
def test_each_launchers_transport_facts(launcher: str) -> None:
    facts = TRANSPORTS[launcher]
    assert tuple(getattr(facts, name) for name in FACT_COLUMNS) == FACTS_TABLE[launcher]


def test_every_runner_has_a_row_and_every_fact_a_column() -> None:
    assert sorted(TRANSPORTS) == sorted(RUNNERS)
    assert tuple(f.name for f in fields(TransportFacts)) == FACT_COLUMNS


@pytest.mark.parametrize(
    ("options", "launcher"),
    [
        ([], "local"),
        (["--launcher", "ssh", "-H", "{hostfile}"], "ssh"),
        (["--launcher", "pdsh", "-H", "{hostfile}"], "pdsh"),
        (["--launcher", "openmpi", "-H", "{hostfile}"], "openmpi"),
        (["--node-rank", "1", "--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "29511"], "node"),
    ],
)
def test_the_plan_carries_its_launchers_facts_over_the_wire(options: list[str], launcher: str, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("w1 slots=1\nw2 slots=1\n")
    (tmp_path / "train.py").write_text("")  # the local launcher checks it exists
    plan = plan_of([arg.format(hostfile=hostfile) for arg in options] + ["train.py"], cwd=tmp_path)
    assert plan.launcher == launcher and plan.transport == TRANSPORTS[launcher]
    assert LaunchPlan.from_json(plan.to_json()).transport == plan.transport
