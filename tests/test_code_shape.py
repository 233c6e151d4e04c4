"""Shape rules ruff has no switch for: no function in dslaunch/ is longer than 60 lines."""

from __future__ import annotations

import ast
from pathlib import Path

MAX_LINES = 60
PACKAGE = Path(__file__).parents[1] / "dslaunch"


def _long_functions(source: str, name: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_LINES:
                found.append(f"{name}:{node.lineno} {node.name}() is {length} lines")
    return found


def test_no_function_in_the_package_is_over_60_lines() -> None:
    found = [
        line
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _long_functions(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not found, "split these functions:\n" + "\n".join(found)


def test_the_rule_sees_a_long_function_and_a_long_method() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    source = f"def long():\n{body}\n\nclass C:\n    def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    assert [line.split()[1] for line in _long_functions(source, "m.py")] == ["long()", "method()"]
    assert _long_functions("def short():\n    return 1\n", "m.py") == []


# ---- the tree: findable by what it does (docs/architecture.md, "Package map") -----------------------------------
MAX_MODULE_LINES = 450
MAX_TOP_LEVEL = 10  # the shared vocabulary and cross-process contracts; everything else lives in a package
TESTS = PACKAGE.parent / "tests"


def test_no_module_is_over_450_lines() -> None:
    long = [
        f"{p.relative_to(PACKAGE.parent)}: {n} lines"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "split these modules:\n" + "\n".join(long)


def test_at_most_ten_modules_sit_loose_at_the_top_level() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_TOP_LEVEL, f"{len(loose)} loose modules: {loose}; group them into a package"


def _private_classes() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.name.startswith("_"):
                found.setdefault(node.name, []).append(str(path.relative_to(PACKAGE.parent)))
    return found


def test_no_private_class_name_is_defined_in_two_modules() -> None:
    twice = {name: where for name, where in _private_classes().items() if len(set(where)) > 1}
    assert not twice, f"one name, several things: {twice}"


def test_every_package_has_its_tests_under_the_same_path() -> None:
    packages = sorted(p.parent.relative_to(PACKAGE) for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE)
    missing = [str(p) for p in packages if not any((TESTS / p).glob("test_*.py"))]
    assert not missing, f"packages without tests/<package>/test_*.py: {missing}"


# A backend folder's runner is its runner.py (runners/pdsh/, runners/slurm/): the one name kept in several places.
SHARED_MODULE_NAMES = {"__init__.py", "__main__.py", "runner.py"}


def test_no_two_modules_share_a_name() -> None:
    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where.setdefault(path.name, []).append(str(path.relative_to(PACKAGE.parent)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1 and name not in SHARED_MODULE_NAMES}
    assert not twice, f"one name, several things: {twice}"
    runners = [p for p in where.get("runner.py", []) if not p.startswith("dslaunch/runners/")]
    assert not runners, f"runner.py names a backend's runner (dslaunch/runners/<backend>/): {runners}"


def test_no_two_packages_share_a_name() -> None:
    """One home per concern: Slurm's pure side is slurmlib/, its runner runners/slurm/ (not two packages "slurm")."""
    where: dict[str, list[str]] = {}
    for init in sorted(PACKAGE.rglob("__init__.py")):
        if init.parent != PACKAGE:
            where.setdefault(init.parent.name, []).append(str(init.parent.relative_to(PACKAGE.parent)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"one package name, several homes: {twice}"


# A folder under runners/ is a backend (its runner.py), or the one home of what ssh and pdsh share.
RUNNERS_SHARED_FOLDERS = {"remote"}


def test_a_runners_folder_is_a_backend_or_the_shared_remote_one() -> None:
    folders = sorted(p.parent for p in (PACKAGE / "runners").glob("*/__init__.py"))
    odd = [f.name for f in folders if not (f / "runner.py").exists() and f.name not in RUNNERS_SHARED_FOLDERS]
    shared_runner = [f.name for f in folders if f.name in RUNNERS_SHARED_FOLDERS and (f / "runner.py").exists()]
    assert not odd, f"runners/ folders without a runner.py that are not shared homes: {odd}"
    assert not shared_runner, f"a shared folder holds a runner: {shared_runner}"


# ---- the launcher side passes its state down; it keeps none in module globals ------------------------------------
# The job's observer and its status line go from the CLI to the runner to job/loop.supervise as arguments, as the
# remote runners' stderr lane does (issue 53). A rank's process state (bootstrap/, observe/rank_windows) is its own.
LAUNCHER_SIDE = ("cli", "job", "output", "observe", "runners", "pods")
RANK_SIDE_STATE = {"dslaunch/observe/rank_windows.py"}


def _global_statements(source: str) -> list[int]:
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Global)]


def test_the_launcher_side_writes_no_module_global() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for package in LAUNCHER_SIDE
        for path in sorted((PACKAGE / package).rglob("*.py"))
        if str(path.relative_to(PACKAGE.parent)) not in RANK_SIDE_STATE
        for line in _global_statements(path.read_text(encoding="utf-8"))
    ]
    assert not found, "pass it down as an argument instead:\n" + "\n".join(found)
    assert _global_statements("x = 0\ndef f():\n    global x\n    x = 1\n") == [3]
