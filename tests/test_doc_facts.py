"""The facts the docs state about the code are read from the docs and checked against the code itself, so a change to
either side that leaves the other behind fails here: the plan's version (docs/architecture.md), the actions of both
supervision cores and the methods of the job core's protocols (introspected: ``typing.get_args`` on each ``Action``
union, the protocol classes' methods), the users of ``channel/`` (from the imports), and Slurm's port formula
(docs/slurm.md: the formula in the doc is evaluated for a table of job and step ids against
``slurmlib.layout.derive_port``, and its range and collision-free span are recomputed)."""

from __future__ import annotations

import ast
import operator
import re
import typing
from collections.abc import Callable
from pathlib import Path

import pytest

from dslaunch import plan
from dslaunch.agent import node_state
from dslaunch.job import protocols, state
from dslaunch.slurmlib import layout
from tests.test_architecture_doc import package_map
from tests.test_imports import imports

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SLURM = ROOT / "docs" / "slurm.md"

# A run of `items`, separated by commas or "and", each perhaps glossed in parentheses: `Signal` (pass a signal on)
ITEM = r"`([^`]+)`(?:\s*\((?:[^`()]|`[^`]*`)*\))?"
BACKTICKED_LIST = re.compile(rf"\s*((?:{ITEM}\s*(?:,|\band\b)?\s*)+)")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def listed_after(text: str, anchor: str, opener: str) -> list[str]:
    """The names in the run of backticked items right after the first ``opener`` that follows ``anchor``:
    ``listed_after(doc, "`job/state.py::JobState`", "→")`` gives ``["StopAll", ..., "Finish"]``. Each item's name is
    its leading identifier (```Finish(Outcome)``` → ``Finish``, ```lines()``` → ``lines``)."""
    start = text.find(anchor)
    assert start >= 0, f"the doc no longer says {anchor}: the test reads the list after it"
    after = text.find(opener, start + len(anchor))
    assert after >= 0, f"no {opener!r} after {anchor} in the doc"
    run = BACKTICKED_LIST.match(text, after + len(opener))
    assert run, f"no list of `names` right after {anchor} ... {opener!r}"
    return [re.match(r"\w+", item).group() for item in re.findall(ITEM, run.group(1))]  # type: ignore[union-attr]


def union_names(union: object) -> list[str]:
    """The class names of a union of classes, nested unions flattened, in the union's order."""
    args = typing.get_args(union)
    if not args:
        assert isinstance(union, type), union
        return [union.__name__]
    return [name for arg in args for name in union_names(arg)]


def protocol_methods(cls: type) -> list[str]:
    return [name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")]


# ---- docs/architecture.md ------------------------------------------------------------------------------------------


def test_the_plan_version_is_the_codes() -> None:
    said = re.findall(r"\(version (\d+), `PLAN_VERSION`\)", _read(ARCHITECTURE))
    assert said, "docs/architecture.md no longer says the plan's version as '(version N, `PLAN_VERSION`)'"
    assert [int(v) for v in said] == [plan.PLAN_VERSION] * len(said), (
        f"docs/architecture.md says plan version {said}, dslaunch/plan.py::PLAN_VERSION is {plan.PLAN_VERSION}"
    )


@pytest.mark.parametrize(
    ("anchor", "union"),
    [("`job/state.py::JobState`", state.Action), ("`agent/node_state.py::NodeState`", node_state.Action)],
    ids=["JobState", "NodeState"],
)
def test_each_cores_actions_are_its_action_union(anchor: str, union: object) -> None:
    said = listed_after(_read(ARCHITECTURE), anchor, "→")
    code = union_names(union)
    assert sorted(said) == sorted(code), (
        f"docs/architecture.md lists {anchor}'s actions as {said}; its Action union is {code} "
        f"(missing: {sorted(set(code) - set(said))}, gone: {sorted(set(said) - set(code))})"
    )


def test_the_names_both_cores_share_are_in_both_unions() -> None:
    shared = listed_after(_read(ARCHITECTURE), "One name per concept on both sides", ":")
    assert shared, "docs/architecture.md names no action both cores share"
    for union in (state.Action, node_state.Action):
        assert set(shared) <= set(union_names(union)), f"{shared} are not all in {union_names(union)}"


def test_the_agent_handles_methods_are_the_protocols() -> None:
    said = listed_after(_read(ARCHITECTURE), "`job/protocols.py::AgentHandle`", "(")
    code = protocol_methods(protocols.AgentHandle)
    assert sorted(said) == sorted(code), f"docs/architecture.md gives AgentHandle {said}; the protocol has {code}"


def test_the_runners_methods_are_each_named_in_the_runners_seam() -> None:
    seam = _read(ARCHITECTURE).split("- **Runners.**", 1)[1].split("\n- **", 1)[0]
    named = set(re.findall(r"`(\w+)", seam))
    missing = [m for m in protocol_methods(protocols.Runner) if m not in named]
    assert not missing, f"docs/architecture.md's Runners seam does not name Runner's {missing}"


def _channel_users() -> list[str]:
    """Each module outside channel/ that imports it, as its path under dslaunch/ without .py."""
    users = {
        i.src for i in imports() if i.dst.startswith("dslaunch.channel") and not i.src.startswith("dslaunch.channel")
    }
    return sorted(u.removeprefix("dslaunch.").replace(".", "/") for u in users)


def test_the_channel_row_names_every_module_that_uses_channel() -> None:
    row = next(text for names, text in package_map(_read(ARCHITECTURE)) if names == ["channel"])
    named = {word for quoted in re.findall(r"`([^`]+)`", row) for word in re.findall(r"\w+", quoted)}
    missing = [user for user in _channel_users() if user.rsplit("/", 1)[-1] not in named]
    assert _channel_users(), "nothing imports dslaunch.channel: the scan is broken"
    assert not missing, f"docs/architecture.md's channel/ row does not name its users {missing}"


def test_the_list_reader_takes_the_list_after_the_opener() -> None:
    text = "x `A::B` (see `z`) → `One`, `Two(x)` (two, not `z()`) and\n  `Three`), `Four`"
    text += " and `C` (`lines()`, `kill()`)."
    assert listed_after(text, "`A::B`", "→") == ["One", "Two", "Three"]
    assert listed_after(text, "`C`", "(") == ["lines", "kill"]
    assert union_names(int | (str | bytes)) == ["int", "str", "bytes"]


# ---- docs/slurm.md: MASTER_PORT -------------------------------------------------------------------------------------

_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
}


def evaluate(formula: str, names: dict[str, int]) -> int:
    """An arithmetic formula of integers and ``names`` (+ - * % //, parentheses), nothing else."""

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        raise ValueError(f"{ast.unparse(node)!r} in {formula!r} is not arithmetic over {sorted(names)}")

    return value(ast.parse(formula, mode="eval").body)


def slurm_port_doc() -> tuple[str, int, int, int]:
    """docs/slurm.md's MASTER_PORT: the formula, its range (lowest, highest) and how many consecutive job ids x 16
    steps never collide."""
    text = " ".join(_read(SLURM).split())  # one line: the sentence may wrap anywhere
    found = re.search(r"`MASTER_PORT` = `([^`]+)`.*? in (\d+)\N{EN DASH}(\d+)\b.*? (\d+) consecutive job ids", text)
    assert found, "docs/slurm.md no longer gives `MASTER_PORT` = `formula`, its range and its consecutive job ids"
    return found.group(1), int(found.group(2)), int(found.group(3)), int(found.group(4))


PORT_TABLE = [(0, 0), (1, 0), (1, 1), (12345, 0), (12345, 3), (749, 15), (750, 0), (374, 15), (375, 0), (5_000_017, 21)]


@pytest.mark.parametrize(("job_id", "step_id"), PORT_TABLE)
def test_the_documented_slurm_port_formula_gives_the_codes_port(job_id: int, step_id: int) -> None:
    formula = slurm_port_doc()[0]
    said = evaluate(formula, {"job_id": job_id, "step_id": step_id})
    assert said == layout.derive_port(job_id, step_id), (
        f"docs/slurm.md's {formula} gives {said} for job {job_id} step {step_id}; "
        f"slurmlib/layout.py::derive_port gives {layout.derive_port(job_id, step_id)}"
    )


def test_the_documented_slurm_port_range_and_span_are_the_codes() -> None:
    _, lowest, highest, span = slurm_port_doc()
    ports = [layout.derive_port(job, step) for job in range(2 * span) for step in range(16)]
    assert (min(ports), max(ports)) == (lowest, highest), f"docs/slurm.md says {lowest} to {highest}"
    for first in (0, 1, 98_765):
        window = [layout.derive_port(job, step) for job in range(first, first + span) for step in range(16)]
        assert len(set(window)) == len(window), f"{span} consecutive job ids from {first} collide"
    longer = [layout.derive_port(job, step) for job in range(span + 1) for step in range(16)]
    assert len(set(longer)) < len(longer), f"docs/slurm.md says {span} job ids; {span + 1} never collide either"


def test_the_formula_reader_takes_arithmetic_only() -> None:
    assert evaluate("20000 + 2 * ((job_id * 16 + step_id % 16) % 6000)", {"job_id": 1, "step_id": 17}) == 20034
    with pytest.raises(ValueError, match="not arithmetic"):
        evaluate("__import__('os').getpid()", {"job_id": 1})
    with pytest.raises(ValueError, match="not arithmetic"):
        evaluate("job_id ** 2", {"job_id": 1})


KUBERNETES = ROOT / "docs" / "kubernetes.md"


def _figure(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_doors_bounds_and_the_relay_budget_are_the_codes() -> None:
    """docs/kubernetes.md said 256 pending and 64 proven connections for two rounds after the code had 4,096 and
    32,768: the figures it gives are read back and compared."""
    from dslaunch.channel import door
    from dslaunch.pods import attempt

    text = _read(KUBERNETES)
    pending = re.search(
        r"At most ([\d,]+) connections that have not sent a valid hello wait \(`channel/door.py::MAX_PENDING`", text
    )
    proven = re.search(r"into the ([\d,]+) that owe an answer \(`MAX_PROVEN`", text)
    relayed = re.search(r"\(the first ([\d,]+) of\s+an attempt, `pods/attempt.py::MAX_RELAYED_FAILURES`", text)
    assert pending and proven and relayed, "docs/kubernetes.md no longer states the door's bounds and the relay budget"
    assert _figure(pending[1]) == door.MAX_PENDING
    assert _figure(proven[1]) == door.MAX_PROVEN
    assert _figure(relayed[1]) == attempt.MAX_RELAYED_FAILURES
